# CMake helpers for msmemscope plugins. The same file serves the source tree
# (sdk/CMakeLists.txt includes it) and the installed package
# (find_package(msmemscope) includes it), so in-tree and third-party plugins
# are built the same way.
#
# msmemscope_add_plugin(<name> SOURCES <src>... [LIBRARIES <lib>...]
#                       [OUTPUT_DIRECTORY <dir>] [INSTALL_DESTINATION <dir>] [NO_INSTALL])
#   Builds the host-side plugin libmsmemscope_plugin_<name>.so (CMake target
#   msmemscope_plugin_<name>): a MODULE linked to msmemscope::sdk, hidden
#   visibility, and a linker version script that exports the entry symbol
#   `msmemscope_plugin` only. The host loads files named
#   libmsmemscope_plugin_*.so from its search path; <name> should be the
#   plugin's type name ([a-z][a-z0-9_]*).
#
# msmemscope_add_agent_library(<name> SOURCES <src>... [LIBRARIES <lib>...]
#                              [OUTPUT_DIRECTORY <dir>] [INSTALL_DESTINATION <dir>] [NO_INSTALL])
#   Builds a library the host loads into the *target* (a collector's hooks):
#   libmsms_<name>.so (target msms_<name>), linked to msmemscope::agent. A
#   collector names it in kAgentLibrary; the host looks for it next to the
#   plugin .so, then in ../agent and ./agent.
#
# NO_INSTALL: no install rule (test fixtures). A plugin given its own
# OUTPUT_DIRECTORY is not a built-in plugin: it gets no install rule unless
# INSTALL_DESTINATION is given too.
# Output and install folders default to MSMEMSCOPE_PLUGIN_OUTPUT_DIR /
# MSMEMSCOPE_PLUGIN_INSTALL_DIR (plugins) and MSMEMSCOPE_AGENT_OUTPUT_DIR /
# MSMEMSCOPE_AGENT_INSTALL_DIR (agent libraries) when those are set (the
# msmemscope build sets them); out of tree, both land in the current binary
# folder, next to each other, which is a valid --plugin-path folder.
include_guard(GLOBAL)

set(MSMEMSCOPE_PLUGIN_VERSION_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/msmemscope_plugin.map"
  CACHE INTERNAL "linker version script of msmemscope plugins")

function(msmemscope_add_plugin name)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DESTINATION" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT name MATCHES "^[a-z][a-z0-9_]*$")
    message(FATAL_ERROR "msmemscope_add_plugin: '${name}' is not a valid plugin name (allowed: [a-z][a-z0-9_]*)")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "msmemscope_add_plugin(${name}): no SOURCES given")
  endif()
  set(target msmemscope_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE msmemscope::sdk ${ARG_LIBRARIES})
  target_compile_features(${target} PRIVATE cxx_std_17)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    SUFFIX ".so"
    OUTPUT_NAME "msmemscope_plugin_${name}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    LINK_DEPENDS "${MSMEMSCOPE_PLUGIN_VERSION_SCRIPT}")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${MSMEMSCOPE_PLUGIN_VERSION_SCRIPT}")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED MSMEMSCOPE_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${MSMEMSCOPE_PLUGIN_OUTPUT_DIR}")
  endif()
  if(ARG_NO_INSTALL OR (ARG_OUTPUT_DIRECTORY AND NOT ARG_INSTALL_DESTINATION))
  elseif(ARG_INSTALL_DESTINATION)
    install(TARGETS ${target} LIBRARY DESTINATION "${ARG_INSTALL_DESTINATION}")
  elseif(DEFINED MSMEMSCOPE_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION "${MSMEMSCOPE_PLUGIN_INSTALL_DIR}")
  endif()
endfunction()

function(msmemscope_add_agent_library name)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DESTINATION" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "msmemscope_add_agent_library(${name}): no SOURCES given")
  endif()
  set(target msms_${name})
  add_library(${target} SHARED ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE msmemscope::agent ${CMAKE_DL_LIBS} ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    BUILD_RPATH "\$ORIGIN;\$ORIGIN/.."
    INSTALL_RPATH "\$ORIGIN;\$ORIGIN/..")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED MSMEMSCOPE_AGENT_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${MSMEMSCOPE_AGENT_OUTPUT_DIR}")
  endif()
  if(ARG_NO_INSTALL OR (ARG_OUTPUT_DIRECTORY AND NOT ARG_INSTALL_DESTINATION))
  elseif(ARG_INSTALL_DESTINATION)
    install(TARGETS ${target} LIBRARY DESTINATION "${ARG_INSTALL_DESTINATION}")
  elseif(DEFINED MSMEMSCOPE_AGENT_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION "${MSMEMSCOPE_AGENT_INSTALL_DIR}")
  endif()
endfunction()
