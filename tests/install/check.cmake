# check.cmake — installs the build tree into a scratch prefix, then builds
# and runs a consumer the two ways users do: find_package(datagrid) and
# pkg-config datagrid.  Run: cmake -DBUILD_DIR=... -DSRC_DIR=... -DWORK=... -P check.cmake
foreach(v BUILD_DIR SRC_DIR WORK C_COMPILER)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check.cmake: -D${v}=... is required")
  endif()
endforeach()
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/datagrid/datagrid.h include/datagrid/marshal/marshal.h)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

# 1. CMake package
run(${CMAKE_COMMAND} -S ${SRC_DIR} -B ${WORK}/cmake-build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${C_COMPILER})
run(${CMAKE_COMMAND} --build ${WORK}/cmake-build)
run(${WORK}/cmake-build/consumer_shared)
run(${WORK}/cmake-build/consumer_static)

# 2. pkg-config
file(GLOB_RECURSE pcs ${prefix}/*/datagrid.pc)
list(GET pcs 0 pc)
get_filename_component(pcdir ${pc} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
execute_process(COMMAND pkg-config --cflags --libs datagrid OUTPUT_VARIABLE flags
  RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config datagrid failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
foreach(f ${flags})
  if(f MATCHES "^-L(.*)")
    set(libdir ${CMAKE_MATCH_1})
  endif()
endforeach()
run(${C_COMPILER} ${SRC_DIR}/consumer.c ${flags} -Wl,-rpath,${libdir} -o ${WORK}/consumer_pc)
run(${WORK}/consumer_pc)
