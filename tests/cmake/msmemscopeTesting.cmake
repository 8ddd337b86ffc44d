# Helpers for tests anywhere in the tree (plugin folders keep their own tests).
#
# msmemscope_add_doctest(<name> SOURCES <src>... [LIBRARIES <lib>...])
#   A doctest executable registered with ctest as <name>.
# msmemscope_add_test_program(<name> SOURCES <src>... [LIBRARIES <lib>...] [C])
#   A program that integration tests run under the CLI; built into
#   ${MSMEMSCOPE_TEST_BIN_DIR} (build/tests/bin), with frame pointers and no
#   optimisation so that allocations are not elided.
include_guard(GLOBAL)
set(MSMEMSCOPE_TEST_BIN_DIR "${CMAKE_BINARY_DIR}/tests/bin")
set(MSMEMSCOPE_TEST_LIB_DIR "${CMAKE_BINARY_DIR}/tests/lib")
find_package(doctest REQUIRED)

add_library(msmemscope_doctest_main STATIC "${CMAKE_SOURCE_DIR}/tests/unit/doctest_main.cpp")
target_link_libraries(msmemscope_doctest_main PUBLIC doctest::doctest)

function(msmemscope_add_doctest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE msmemscope_doctest_main msmemscope::sdk ${ARG_LIBRARIES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${MSMEMSCOPE_TEST_BIN_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT
    "MSMEMSCOPE_BUILD=${CMAKE_BINARY_DIR};MSMEMSCOPE_SOURCE=${CMAKE_SOURCE_DIR}")
endfunction()

function(msmemscope_add_test_program name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBRARIES})
  target_compile_options(${name} PRIVATE -O0 -g -fno-omit-frame-pointer -fno-builtin)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${MSMEMSCOPE_TEST_BIN_DIR}")
endfunction()
