# Installs the build into a scratch prefix, then builds and runs a consumer through
# find_package(tracepool) and checks the pkg-config file. Run by ctest: cmake -P check.cmake.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
sanitizer_flags(flags)
# A sanitized library needs a consumer linked with the same sanitizer runtime.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/consumer -DCMAKE_PREFIX_PATH=${prefix}
    "-DCMAKE_C_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/consumer)
message(STATUS "consumer: ${last_output}")
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  file(GLOB_RECURSE pc_files ${prefix}/*/tracepool.pc)
  get_filename_component(pc_dir "${pc_files}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pc_dir})
  run(${PKG_CONFIG} --libs tracepool)
  if(NOT last_output MATCHES "-ltracepool")
    message(FATAL_ERROR "pkg-config --libs tracepool gave '${last_output}'")
  endif()
endif()
