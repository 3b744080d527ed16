# SKYMEM platform (per-CPU) configuration headers; see mission_build.cmake.
set(SKYMEM_PLATFORM_CONFIG_FILE_LIST
  skymem_internal_cfg.h
  skymem_perfids.h
  skymem_msgids.h
)

foreach(SKYMEM_CFGFILE ${SKYMEM_PLATFORM_CONFIG_FILE_LIST})
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
