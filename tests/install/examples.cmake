# Builds one of examples/c, examples/cpp, examples/ctypes against a scratch install of the build, the
# way a user outside this tree would, and runs it on BACKEND (host unless given). Passes only if the
# example exits 0 and its report flags the example's own leak as GROWING at the site that made it.
# Run by ctest (tests/CMakeLists.txt) on the host backend, one case per EXAMPLE, and by the GPU check
# (tests/gpu/run.sh) with BACKEND=cuda:
#   cmake -DBUILD_DIR=B -DSANITIZE=S -DEXAMPLES=examples -DWORK_DIR=W -DCC=cc -DPYTHON=python3
#         -DEXAMPLE=c|c_pkgconfig|cpp|ctypes [-DBACKEND=cuda] -P examples.cmake
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
function(expect regex what)
  if(NOT last_output MATCHES "${regex}")
    message(FATAL_ERROR "the ${EXAMPLE} example's output does not show ${what}:\n${last_output}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
sanitizer_flags(flags)
if(NOT BACKEND)
  set(BACKEND host)
endif()
set(ENV{TRACEPOOL_CONF} "backend:${BACKEND}")

if(EXAMPLE STREQUAL "c" OR EXAMPLE STREQUAL "cpp")
  # find_package(tracepool), as examples/<name>/CMakeLists.txt says.
  run(${CMAKE_COMMAND} -S ${EXAMPLES}/${EXAMPLE} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
      "-DCMAKE_C_FLAGS=${flags}" "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
  if(EXAMPLE STREQUAL "c")
    run(${WORK_DIR}/build/runtime)
  else()
    run(${WORK_DIR}/build/host)
  endif()
elseif(EXAMPLE STREQUAL "c_pkgconfig")
  # cc -std=c11 runtime.c $(pkg-config --cflags --libs tracepool), as a Makefile would.
  find_program(PKG_CONFIG pkg-config REQUIRED)
  file(GLOB_RECURSE pc_files ${prefix}/*/tracepool.pc)
  get_filename_component(pc_dir "${pc_files}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pc_dir})
  run(${PKG_CONFIG} --cflags --libs tracepool)
  string(STRIP "${last_output}" pc_flags)
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  run(${PKG_CONFIG} --variable=libdir tracepool)
  string(STRIP "${last_output}" libdir)
  separate_arguments(san UNIX_COMMAND "${flags}")
  run(${CC} -std=c11 -g -Wall -Wextra -pedantic -Werror ${san} ${EXAMPLES}/c/runtime.c ${pc_flags}
      -Wl,-rpath,${libdir} -o ${WORK_DIR}/runtime)
  run(${WORK_DIR}/runtime)
elseif(EXAMPLE STREQUAL "ctypes")
  file(GLOB_RECURSE libs ${prefix}/*/libtracepool.so)
  run(${PYTHON} ${EXAMPLES}/ctypes/host.py ${libs})
else()
  message(FATAL_ERROR "EXAMPLE must be c, c_pkgconfig, cpp or ctypes, not '${EXAMPLE}'")
endif()
message(STATUS "${EXAMPLE} example:\n${last_output}")
expect("on the ${BACKEND} backend" "the ${BACKEND} backend")

if(EXAMPLE STREQUAL "cpp")
  expect("GROWING across marks[^\n]*\n *at host::buffer::buffer[^\n]*\n *at [^\n]*model::remember\\(int\\) \\([^)]*host.cpp:[0-9]+\\)"
         "remember() as the growing site")
  expect("refused as expected: tracepool_malloc: TRACEPOOL_ERR_INVALID_ARGUMENT" "the huge request refused")
  expect("every buffer freed by its destructor" "every buffer freed")
elseif(EXAMPLE STREQUAL "ctypes")
  expect("\\[ctypes: keep\\]  GROWING across marks: 256.00 KiB 512.00 KiB 768.00 KiB 1.00 MiB"
         "the kept buffers' site, by its tag, as growing")
  expect("double free refused: tracepool_free: TRACEPOOL_ERR_DOUBLE_FREE" "the double free refused")
else()
  expect("GROWING across marks: 1.00 MiB 2.00 MiB 3.00 MiB 4.00 MiB[^\n]*\n *at array_new \\([^)]*runtime.c:[0-9]+\\)\n *at keep_result"
         "keep_result() as the growing site")
endif()
