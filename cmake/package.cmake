# The installed C++ package: `cmake --install <build> --prefix P` puts the engine's static libraries,
# the public headers (src/trainrt/trainrt.h lists them) with the headers they include, the CLI, a CMake
# package (find_package(TrainRT CONFIG) -> TrainRT::trainrt) and a pkg-config file (trainrt.pc) under P.
# Not part of the Python wheel (scikit-build installs the extension module only).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TRAINRT_LAYERS core ir ops kernels kernels_cpu kernels_codegen autodiff passes plan runtime optim train)

# The headers trainrt.h reaches through `#include "trainrt/..."`, found by reading them.
function(trainrt_header_closure out)
  set(pending "trainrt/trainrt.h")
  set(found "")
  while(pending)
    list(POP_FRONT pending header)
    if(header IN_LIST found)
      continue()
    endif()
    list(APPEND found ${header})
    file(STRINGS "${CMAKE_SOURCE_DIR}/src/${header}" includes REGEX "^#include \"trainrt/.*\\.h\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"(trainrt/[^\"]*)\".*" "\\1" included "${line}")
      list(APPEND pending ${included})
    endforeach()
  endwhile()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

trainrt_header_closure(TRAINRT_INSTALLED_HEADERS)
foreach(header IN LISTS TRAINRT_INSTALLED_HEADERS)
  get_filename_component(dir "${header}" DIRECTORY)
  install(FILES "${CMAKE_SOURCE_DIR}/src/${header}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/${dir}")
endforeach()

set(layer_targets "")
foreach(layer IN LISTS TRAINRT_LAYERS)
  list(APPEND layer_targets trainrt_${layer})
endforeach()
install(TARGETS ${layer_targets} trainrt trainrt_gemm_backend EXPORT TrainRTTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(TARGETS trainrt_cli RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
install(EXPORT TrainRTTargets NAMESPACE TrainRT:: DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/TrainRT")
configure_package_config_file(cmake/TrainRTConfig.cmake.in "${CMAKE_BINARY_DIR}/TrainRTConfig.cmake"
                              INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/TrainRT")
write_basic_package_version_file("${CMAKE_BINARY_DIR}/TrainRTConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/TrainRTConfig.cmake" "${CMAKE_BINARY_DIR}/TrainRTConfigVersion.cmake"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/TrainRT")

# pkg-config: static libraries in link order (each before those it uses), then the system ones.
set(TRAINRT_PC_LIBS "")
foreach(layer train runtime plan passes autodiff kernels_codegen kernels_cpu kernels ops ir optim core)
  string(APPEND TRAINRT_PC_LIBS " -ltrainrt_${layer}")
endforeach()
get_filename_component(TRAINRT_DNNL_LIBDIR "${TRAINRT_DNNL_LIBRARY}" DIRECTORY)
configure_file(cmake/trainrt.pc.in "${CMAKE_BINARY_DIR}/trainrt.pc" @ONLY)
install(FILES "${CMAKE_BINARY_DIR}/trainrt.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
