# msmemscope_add_plugin(<name> SOURCES <src>... [LIBRARIES <lib>...])
#   Builds a plugin shared library named libmsmemscope_plugin_<name>.so with
#   hidden visibility, so that only the entry symbol is exported. The host
#   loads files named libmsmemscope_plugin_*.so from its search path.
#
# msmemscope_add_agent_library(<name> SOURCES <src>... [LIBRARIES <lib>...])
#   Builds a library that the host loads into the *target* (a collector's
#   hooks): libmsms_<name>.so, linked to the agent, no C++ exceptions needed.
include_guard(GLOBAL)

function(msmemscope_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  set(target msmemscope_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE msmemscope::sdk ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "msmemscope_plugin_${name}"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED MSMEMSCOPE_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${MSMEMSCOPE_PLUGIN_OUTPUT_DIR}")
  endif()
  if(DEFINED MSMEMSCOPE_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION "${MSMEMSCOPE_PLUGIN_INSTALL_DIR}")
  endif()
endfunction()

function(msmemscope_add_agent_library name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  set(target msms_${name})
  add_library(${target} SHARED ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE msmemscope::agent ${CMAKE_DL_LIBS} ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    BUILD_RPATH "\$ORIGIN"
    INSTALL_RPATH "\$ORIGIN")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED MSMEMSCOPE_AGENT_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${MSMEMSCOPE_AGENT_OUTPUT_DIR}")
  endif()
  if(DEFINED MSMEMSCOPE_AGENT_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION "${MSMEMSCOPE_AGENT_INSTALL_DIR}")
  endif()
endfunction()
