# Third-party dependencies, all from Debian packages or PyPI (see README "Set-up").
#
# GEMM backend: oneDNN 2.x from Debian 12 (apt-get install libdnnl-dev), chosen by measurement
# (docs/gemm.md, bench/gemm/). The target trainrt_gemm_backend carries its include dir and library.
# We look for the library by its 2.x soname rather than through dnnl-config.cmake: that file also
# demands the OpenCL headers (Debian's build has an OpenCL GPU runtime we do not use), and a venv
# may hold PyPI's onednn-devel (3.x, SYCL runtime, not usable here) whose config would match too.
find_library(TRAINRT_DNNL_LIBRARY NAMES libdnnl.so.2
             DOC "oneDNN 2.x shared library (Debian package libdnnl2)")
if(TRAINRT_DNNL_LIBRARY)
  # The headers installed beside that library first (a venv's 3.x headers must not win).
  get_filename_component(_dnnl_libdir "${TRAINRT_DNNL_LIBRARY}" DIRECTORY)
  find_path(TRAINRT_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp
            HINTS "${_dnnl_libdir}/../../include" "${_dnnl_libdir}/../include" NO_DEFAULT_PATH
            DOC "oneDNN 2.x headers (Debian package libdnnl-dev)")
  find_path(TRAINRT_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
endif()
if(NOT TRAINRT_DNNL_LIBRARY OR NOT TRAINRT_DNNL_INCLUDE_DIR)
  message(FATAL_ERROR
    "TrainRT needs oneDNN 2.x for its GEMM backend and did not find it (looked for the "
    "library libdnnl.so.2 and the header oneapi/dnnl/dnnl.hpp). "
    "On Debian 12 install it with:  apt-get install libdnnl-dev")
endif()
file(STRINGS "${TRAINRT_DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_major
     REGEX "^#define DNNL_VERSION_MAJOR [0-9]+")
string(REGEX MATCH "[0-9]+$" _dnnl_major "${_dnnl_major}")
if(NOT _dnnl_major EQUAL 2)
  message(FATAL_ERROR
    "The oneDNN headers in ${TRAINRT_DNNL_INCLUDE_DIR} are version ${_dnnl_major}.x; TrainRT's "
    "GEMM backend is written for 2.x (Debian 12's libdnnl-dev). Install it with:  "
    "apt-get install libdnnl-dev, or point TRAINRT_DNNL_INCLUDE_DIR at its headers.")
endif()
message(STATUS "GEMM backend: oneDNN 2.x, ${TRAINRT_DNNL_LIBRARY}")

add_library(trainrt_gemm_backend INTERFACE)
target_include_directories(trainrt_gemm_backend SYSTEM INTERFACE "${TRAINRT_DNNL_INCLUDE_DIR}")
# gemm.cc sets the OpenMP team size of the threads that call oneDNN (omp_set_num_threads), so it
# links the OpenMP runtime oneDNN uses, GCC's libgomp, itself (no -fopenmp: no pragmas of ours).
target_link_libraries(trainrt_gemm_backend INTERFACE "${TRAINRT_DNNL_LIBRARY}" gomp)
