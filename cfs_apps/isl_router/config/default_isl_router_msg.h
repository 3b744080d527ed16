/* ISL_ROUTER messages: compatibility header. */
#ifndef ISL_ROUTER_MSG_H
#define ISL_ROUTER_MSG_H

#include "isl_router_msgdefs.h"
#include "isl_router_msgstruct.h"

#endif
