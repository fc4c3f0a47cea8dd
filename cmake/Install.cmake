# Install rules: `cmake --install <build> --prefix <prefix>` and `pip install .` (scikit-build-core,
# see pyproject.toml) give the same layout, which `vramscope run` relies on:
#
#   <prefix>/bin/vramscope                              the command
#   <prefix>/lib/vramscope/libvramscope_inject.so       the native capture library, when CUPTI was
#                                                       found (src/native_capture/, --native); the binary
#                                                       looks for it at <its dir>/../lib/vramscope/
#   <site-packages>/vramscope/                          the Python package (pip only: the binary
#                                                       embeds the same files for itself)
#
# Under pip, <prefix> is the environment (the virtual environment's root): pyproject.toml sets the
# install prefix to the wheel's data tree (${SKBUILD_DATA_DIR}), so relative destinations such as
# the native library's ${VRAMSCOPE_INJECT_INSTALL_DIR} (lib/vramscope, which pyproject.toml also
# passes with -D, so that it is set before src/ is configured) land under <venv>/, the binary goes
# to the wheel's scripts (${SKBUILD_SCRIPTS_DIR}, <venv>/bin) and the package to site-packages
# (${SKBUILD_PLATLIB_DIR}). Nothing lands in site-packages but the package.
#
# Included at the end of the top-level CMakeLists.txt, after every target exists.

if(SKBUILD)
  set(vramscope_bin_destination "${SKBUILD_SCRIPTS_DIR}")
else()
  set(vramscope_bin_destination bin)
endif()
install(TARGETS vramscope RUNTIME DESTINATION "${vramscope_bin_destination}")

if(SKBUILD)
  # The package as it is in the source tree: its Python files and vocabulary.json (no __pycache__ or
  # editor files).
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/python/vramscope/"
          DESTINATION "${SKBUILD_PLATLIB_DIR}/vramscope"
          FILES_MATCHING PATTERN "*.py" PATTERN "*.json" PATTERN "py.typed"
          PATTERN "__pycache__" EXCLUDE)
endif()

# VRAMSCOPE_INJECT_INSTALL_DIR itself (default lib/vramscope) is defined where vramscope_inject's
# install rule is (src/native_capture/), which runs before this file. The binary finds the library at
# <bin>/../lib/vramscope; a custom value that breaks that is said at configure time.
if(TARGET vramscope_inject AND DEFINED VRAMSCOPE_INJECT_INSTALL_DIR
   AND NOT VRAMSCOPE_INJECT_INSTALL_DIR STREQUAL "lib/vramscope")
  message(WARNING "vramscope_inject installs to ${VRAMSCOPE_INJECT_INSTALL_DIR}, not lib/vramscope "
    "beside bin/: `vramscope run --native` will not find it there by itself")
endif()
