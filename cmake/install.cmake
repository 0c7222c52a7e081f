# Installation (`make install PREFIX=...` or `cmake --install BUILD --prefix ...`): the hearth
# CLI with the default model, the library (libhearth.a) and the HTTP server over it
# (libhearth-server.a) with the public headers (include/hearth/), a CMake package
# (find_package(hearth) → hearth::hearth, hearth::server) and pkg-config files (hearth,
# hearth-server). The libraries are static, so both carry what they link against: Threads, fmt,
# PCRE2, utf8proc and, in a CUDA build, the CUDA runtime and cuBLAS(Lt); the server adds nothing
# (Boost and nlohmann/json are header-only and appear in no installed header).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS hearth RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The default model, where an installed hearth looks for it (PREFIX/share/hearth/models/default,
# src/cli/common.cpp), so `hearth` without -m works from any directory. The chat page needs no
# files: it is compiled in.
install(FILES models/default/config.json models/default/generation_config.json
              models/default/model.safetensors models/default/tokenizer.json
              models/default/tokenizer_config.json models/default/README.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/hearth/models/default)
install(TARGETS hearth_lib hearth_server ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/hearth DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(HEARTH_PACKAGE_CUDA ${HEARTH_HAVE_CUDA})
configure_package_config_file(cmake/hearthConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/hearthConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hearth)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/hearthConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/hearthConfig.cmake ${CMAKE_BINARY_DIR}/hearthConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hearth)

set(HEARTH_PC_CUDA_LIBS "")
if(HEARTH_HAVE_CUDA)
  set(HEARTH_PC_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcublasLt -lcublas -lcudart")
endif()
# Relocatable: the prefix is found from the .pc file's own place, so a package installed with
# --prefix elsewhere (or moved) still describes itself.
file(RELATIVE_PATH HEARTH_PC_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(cmake/hearth.pc.in ${CMAKE_BINARY_DIR}/hearth.pc @ONLY)
configure_file(cmake/hearth-server.pc.in ${CMAKE_BINARY_DIR}/hearth-server.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/hearth.pc ${CMAKE_BINARY_DIR}/hearth-server.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
