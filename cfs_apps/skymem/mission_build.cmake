# SKYMEM mission-wide configuration headers. Each default_<name>.h in config/
# becomes <name>.h unless the mission supplies its own copy (same mechanism as
# nasa/sample_app), so a mission can override any of them without editing the app.
set(SKYMEM_MISSION_CONFIG_FILE_LIST
  skymem_fcncodes.h
  skymem_msgdefs.h
  skymem_msgstruct.h
  skymem_msg.h
  skymem_tbldefs.h
  skymem_tbl.h
)

foreach(SKYMEM_CFGFILE ${SKYMEM_MISSION_CONFIG_FILE_LIST})
  get_filename_component(CFGKEY "${SKYMEM_CFGFILE}" NAME_WE)
  if (DEFINED SKYMEM_CFGFILE_SRC_${CFGKEY})
    set(DEFAULT_SOURCE GENERATED_FILE "${SKYMEM_CFGFILE_SRC_${CFGKEY}}")
  else()
    set(DEFAULT_SOURCE FALLBACK_FILE "${CMAKE_CURRENT_LIST_DIR}/config/default_${SKYMEM_CFGFILE}")
  endif()
  generate_config_includefile(
    FILE_NAME           "${SKYMEM_CFGFILE}"
    ${DEFAULT_SOURCE}
  )
endforeach()
