# ISL_ROUTER platform (per-CPU) configuration headers; see mission_build.cmake.
set(ISL_ROUTER_PLATFORM_CONFIG_FILE_LIST
  isl_router_internal_cfg.h
  isl_router_perfids.h
  isl_router_msgids.h
)

foreach(ISL_ROUTER_CFGFILE ${ISL_ROUTER_PLATFORM_CONFIG_FILE_LIST})
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
