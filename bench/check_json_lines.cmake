# check_json_lines.cmake — the dgbench_smoke test (cmake -P).
#
# Runs `DGBENCH SUITE --quick --json` and checks its stdout: every line is a
# JSON object (parsed by CMake's string(JSON)) with string fields suite
# (= SUITE), case and impl, a number ns_per_op, any other field one of
# DESIGN.md's numbers, and a datagrid line for every case in EXPECT (comma
# separated; an element CASE/IMPL asks for that implementation's line).  No timing assertion: benchmarks are not tests.
#
#   cmake -DDGBENCH=path/to/dgbench -DSUITE=marshal -DEXPECT=a,b -P check_json_lines.cmake
cmake_minimum_required(VERSION 3.19) # string(JSON)

if(NOT DGBENCH OR NOT SUITE)
  message(FATAL_ERROR "usage: cmake -DDGBENCH=... -DSUITE=... [-DEXPECT=a,b] -P ${CMAKE_CURRENT_LIST_FILE}")
endif()

execute_process(COMMAND "${DGBENCH}" "${SUITE}" --quick --json
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dgbench ${SUITE} exited with '${rc}'\nstderr:\n${err}")
endif()
message(STATUS "dgbench stderr:\n${err}")

# string(JSON) (jsoncpp) is lenient (it takes trailing commas, comments), so
# each line must also match the strict grammar of what dgbench prints: a
# compact (no whitespace) flat JSON object of strings and numbers.
set(str "\"([^\"\\\\]|\\\\.)*\"")
set(num "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?")
set(member "^${str}:(${str}|${num})")

# strict_object(line ok): ok TRUE if line matches the grammar (member by
# member: CMake regexes allow only 9 groups).
function(strict_object line ok)
  set(${ok} FALSE PARENT_SCOPE)
  if(NOT line MATCHES "^{(.*)}$")
    return()
  endif()
  set(body "${CMAKE_MATCH_1}")
  while(TRUE)
    if(NOT body MATCHES "${member}")
      return()
    endif()
    string(LENGTH "${CMAKE_MATCH_0}" n)
    string(SUBSTRING "${body}" ${n} -1 body)
    if(body STREQUAL "")
      break()
    endif()
    if(NOT body MATCHES "^,")
      return()
    endif()
    string(SUBSTRING "${body}" 1 -1 body)
  endwhile()
  set(${ok} TRUE PARENT_SCOPE)
endfunction()

# DESIGN.md's numbers, the txn suite's counts of retried attempts and of
# transfers that did not commit, and the transport suite's context switches
set(numbers ns_per_op p50_us p99_us ops_per_s bytes allocs_per_op heap_bytes_per_op
  retries failed ctx_switches_per_op)
set(seen "")
set(nlines 0)
set(rest "${out}")
while(NOT rest STREQUAL "")
  # one line at a time, without CMake list splitting (no ';' or '[' games)
  string(FIND "${rest}" "\n" nl)
  if(nl EQUAL -1)
    message(FATAL_ERROR "last stdout line is not newline-terminated: ${rest}")
  endif()
  string(SUBSTRING "${rest}" 0 ${nl} line)
  math(EXPR nl "${nl} + 1")
  string(SUBSTRING "${rest}" ${nl} -1 rest)
  math(EXPR nlines "${nlines} + 1")

  string(JSON type ERROR_VARIABLE jerr TYPE "${line}")
  strict_object("${line}" strict)
  if(jerr OR NOT type STREQUAL "OBJECT" OR NOT strict)
    message(FATAL_ERROR "line ${nlines} is not a JSON object: ${line}\n${jerr}")
  endif()
  foreach(key suite case impl)
    string(JSON t ERROR_VARIABLE jerr TYPE "${line}" ${key})
    if(jerr OR NOT t STREQUAL "STRING")
      message(FATAL_ERROR "line ${nlines}: '${key}' missing or not a string: ${line}")
    endif()
    string(JSON v_${key} GET "${line}" ${key})
  endforeach()
  if(NOT v_suite STREQUAL SUITE)
    message(FATAL_ERROR "line ${nlines}: suite '${v_suite}', expected '${SUITE}'")
  endif()
  string(JSON t ERROR_VARIABLE jerr TYPE "${line}" ns_per_op)
  if(jerr OR NOT t STREQUAL "NUMBER")
    message(FATAL_ERROR "line ${nlines}: 'ns_per_op' missing or not a number: ${line}")
  endif()
  string(JSON nkeys LENGTH "${line}")
  math(EXPR last "${nkeys} - 1")
  foreach(i RANGE ${last})
    string(JSON key MEMBER "${line}" ${i})
    if(key MATCHES "^(suite|case|impl)$")
      continue()
    endif()
    if(NOT key IN_LIST numbers)
      message(FATAL_ERROR "line ${nlines}: unknown field '${key}': ${line}")
    endif()
    string(JSON t TYPE "${line}" ${key})
    if(NOT t STREQUAL "NUMBER")
      message(FATAL_ERROR "line ${nlines}: '${key}' is not a number: ${line}")
    endif()
  endforeach()
  if(v_impl STREQUAL "datagrid")
    list(APPEND seen "${v_case}")
  endif()
  list(APPEND seen "${v_case}/${v_impl}")
endwhile()

if(nlines EQUAL 0)
  message(FATAL_ERROR "dgbench ${SUITE} printed no JSON lines\nstderr:\n${err}")
endif()
if(EXPECT)
  string(REPLACE "," ";" expect "${EXPECT}")
  foreach(c IN LISTS expect)
    if(NOT c IN_LIST seen)
      message(FATAL_ERROR "no datagrid line for case '${c}' (CASE/IMPL: no such line)")
    endif()
  endforeach()
endif()
message(STATUS "dgbench ${SUITE}: ${nlines} valid JSON lines")
