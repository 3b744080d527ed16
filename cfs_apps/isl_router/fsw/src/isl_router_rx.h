/* ISL_ROUTER receive task: waits on the ISL and ground sockets. */
#ifndef ISL_ROUTER_RX_H
#define ISL_ROUTER_RX_H

void ISL_ROUTER_RxTask(void);

#endif
