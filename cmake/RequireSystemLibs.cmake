# System libraries, each named with the Debian package that provides it, so that a missing one
# ends the configure (and a `pip install .`) with one line that says what to install instead of
# CMake's page about <Package>Config.cmake search paths.
#
#   vramscope_require(<Package> <debian-package>... [ARGS <find_package arguments>...])
#       find_package(<Package> <arguments> QUIET); when not found, remembers the Debian package(s).
#   vramscope_require_path(<variable> <what> <debian-package>...)
#       the same for a find_path/find_library result already in <variable>.
#   vramscope_require_check()
#       one FATAL_ERROR line naming everything missing, with the apt command; nothing when all found.
#
# Macros, not functions: find_package's results (<Package>_FOUND, imported targets, variables)
# must land in the caller's scope.
set(VRAMSCOPE_MISSING_LIBRARIES "")
set(VRAMSCOPE_MISSING_DEBIAN_PACKAGES "")

macro(vramscope_require package)
  cmake_parse_arguments(_vramscope_require "" "" "ARGS" ${ARGN})
  find_package(${package} ${_vramscope_require_ARGS} QUIET)
  if(NOT ${package}_FOUND)
    list(APPEND VRAMSCOPE_MISSING_LIBRARIES "${package}")
    list(APPEND VRAMSCOPE_MISSING_DEBIAN_PACKAGES ${_vramscope_require_UNPARSED_ARGUMENTS})
  endif()
endmacro()

macro(vramscope_require_path variable what)
  if(NOT ${variable})
    list(APPEND VRAMSCOPE_MISSING_LIBRARIES "${what}")
    list(APPEND VRAMSCOPE_MISSING_DEBIAN_PACKAGES ${ARGN})
  endif()
endmacro()

macro(vramscope_require_check)
  if(VRAMSCOPE_MISSING_LIBRARIES)
    list(REMOVE_DUPLICATES VRAMSCOPE_MISSING_DEBIAN_PACKAGES)
    list(JOIN VRAMSCOPE_MISSING_LIBRARIES ", " _vramscope_missing)
    list(JOIN VRAMSCOPE_MISSING_DEBIAN_PACKAGES " " _vramscope_packages)
    # The leading space keeps CMake from wrapping the line (it prints pre-formatted text as is).
    message(FATAL_ERROR " vramscope: missing system libraries (${_vramscope_missing}); install "
      "them with: sudo apt install ${_vramscope_packages} (or run scripts/install-deps.sh)")
  endif()
endmacro()
