# Turns a file into a C++ byte array:
#   cmake -DINPUT=... -DOUTPUT=... -DSYMBOL=... [-DNAMESPACE=vramscope::cli] -P EmbedFile.cmake
if(NOT DEFINED NAMESPACE)
  set(NAMESPACE "vramscope::cli")
endif()
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUTPUT}"
  "// Generated from ${INPUT} by cmake/EmbedFile.cmake. Do not edit.\n"
  "#include <cstddef>\n#include <cstdint>\n#include <span>\n"
  "namespace ${NAMESPACE} {\n"
  "namespace { alignas(8) const uint8_t kData[] = {${bytes}}; }\n"
  "std::span<const uint8_t> ${SYMBOL}() { return {kData, ${size}}; }\n"
  "}  // namespace ${NAMESPACE}\n")
