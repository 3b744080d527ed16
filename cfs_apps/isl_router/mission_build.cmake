# ISL_ROUTER mission-wide configuration headers. Each default_<name>.h in config/
# becomes <name>.h unless the mission supplies its own copy (same mechanism as
# nasa/sample_app), so a mission can override any of them without editing the app.
set(ISL_ROUTER_MISSION_CONFIG_FILE_LIST
  isl_router_fcncodes.h
  isl_router_msgdefs.h
  isl_router_msgstruct.h
  isl_router_msg.h
)

foreach(ISL_ROUTER_CFGFILE ${ISL_ROUTER_MISSION_CONFIG_FILE_LIST})
  get_filename_component(CFGKEY "${ISL_ROUTER_CFGFILE}" NAME_WE)
  if (DEFINED ISL_ROUTER_CFGFILE_SRC_${CFGKEY})
    set(DEFAULT_SOURCE GENERATED_FILE "${ISL_ROUTER_CFGFILE_SRC_${CFGKEY}}")
  else()
    set(DEFAULT_SOURCE FALLBACK_FILE "${CMAKE_CURRENT_LIST_DIR}/config/default_${ISL_ROUTER_CFGFILE}")
  endif()
  generate_config_includefile(
    FILE_NAME           "${ISL_ROUTER_CFGFILE}"
    ${DEFAULT_SOURCE}
  )
endforeach()
