# vramscope_embed_file(<source variable> INPUT <file> SYMBOL <name> NAMESPACE <ns> COMMENT <text>)
# Compiles a file into the library as a byte array (cmake/EmbedFile.cmake writes the source,
# `std::span<const uint8_t> <ns>::<name>()`), remade when the file changes; the generated source's
# path goes into <source variable>, to list among the library's sources.
function(vramscope_embed_file out_var)
  cmake_parse_arguments(ARG "" "INPUT;SYMBOL;NAMESPACE;COMMENT" "" ${ARGN})
  set(source ${CMAKE_CURRENT_BINARY_DIR}/${ARG_SYMBOL}_data.cc)
  add_custom_command(
    OUTPUT ${source}
    COMMAND ${CMAKE_COMMAND} -DINPUT=${ARG_INPUT} -DOUTPUT=${source} -DSYMBOL=${ARG_SYMBOL}
            -DNAMESPACE=${ARG_NAMESPACE} -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFile.cmake
    DEPENDS ${ARG_INPUT} ${PROJECT_SOURCE_DIR}/cmake/EmbedFile.cmake
    COMMENT "${ARG_COMMENT}")
  set(${out_var} ${source} PARENT_SCOPE)
endfunction()
