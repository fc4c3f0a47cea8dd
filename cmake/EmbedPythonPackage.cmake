# Turns the files of a Python package into one C++ table, path (relative to the package) -> bytes:
#   cmake -DPACKAGE_DIR=... -DFILES="a.py|sub/b.py" -DOUTPUT=... -P EmbedPythonPackage.cmake
# (FILES is separated by "|": a CMake list would be split into separate arguments on the way.)
# The table is what src/capture/embedded_python.h exposes; src/capture/CMakeLists.txt globs the files.
string(REPLACE "|" ";" files "${FILES}")
list(SORT files)
set(arrays "")
set(entries "")
set(index 0)
foreach(file IN LISTS files)
  file(READ "${PACKAGE_DIR}/${file}" hex HEX)
  string(LENGTH "${hex}" hex_length)
  math(EXPR size "${hex_length} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  if(size EQUAL 0)
    set(bytes "0")  # an empty file: a one-byte array, size 0
  endif()
  string(APPEND arrays "alignas(8) const uint8_t kFile${index}[] = {${bytes}};\n")
  string(APPEND entries "    {\"${file}\", {kFile${index}, ${size}}},\n")
  math(EXPR index "${index} + 1")
endforeach()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${PACKAGE_DIR} by cmake/EmbedPythonPackage.cmake. Do not edit.\n"
  "#include \"capture/embedded_python.h\"\n"
  "namespace vramscope::capture {\n"
  "namespace {\n${arrays}"
  "const EmbeddedFile kFiles[] = {\n${entries}};\n"
  "}  // namespace\n"
  "std::span<const EmbeddedFile> EmbeddedPythonPackage() { return kFiles; }\n"
  "}  // namespace vramscope::capture\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
