/* SKYMEM table names and files. */
#ifndef SKYMEM_TBL_H
#define SKYMEM_TBL_H

#include "skymem_tbldefs.h"

/* Registered name; other apps share it as "SKYMEM.Constellation". */
#define SKYMEM_CONSTELLATION_TBL_NAME      "Constellation"
#define SKYMEM_CONSTELLATION_TBL_FULL_NAME "SKYMEM.Constellation"
#define SKYMEM_CONSTELLATION_TBL_FILE      "/cf/skymem_tbl.tbl"

#endif
