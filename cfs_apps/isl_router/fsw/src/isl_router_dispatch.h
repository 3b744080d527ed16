/* ISL_ROUTER message dispatch. */
#ifndef ISL_ROUTER_DISPATCH_H
#define ISL_ROUTER_DISPATCH_H

#include "cfe.h"

void ISL_ROUTER_TaskPipe(const CFE_SB_Buffer_t *SBBufPtr);
void ISL_ROUTER_ProcessGroundCommand(const CFE_SB_Buffer_t *SBBufPtr);
bool ISL_ROUTER_VerifyCmdLength(const CFE_MSG_Message_t *MsgPtr, size_t ExpectedLength);

#endif
