/* SKYMEM version. */
#ifndef SKYMEM_VERSION_H
#define SKYMEM_VERSION_H

#define SKYMEM_MAJOR_VERSION 1
#define SKYMEM_MINOR_VERSION 0
#define SKYMEM_REVISION      0
#define SKYMEM_VERSION       "v1.0.0"

#endif
