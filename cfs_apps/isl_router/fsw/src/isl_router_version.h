/* ISL_ROUTER version. */
#ifndef ISL_ROUTER_VERSION_H
#define ISL_ROUTER_VERSION_H

#define ISL_ROUTER_VERSION "v1.0.0"

#endif
