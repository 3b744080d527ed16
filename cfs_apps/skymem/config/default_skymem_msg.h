/* SKYMEM messages: compatibility header that pulls in the definitions and structures. */
#ifndef SKYMEM_MSG_H
#define SKYMEM_MSG_H

#include "skymem_msgdefs.h"
#include "skymem_msgstruct.h"

#endif
