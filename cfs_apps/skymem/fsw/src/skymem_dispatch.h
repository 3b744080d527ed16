/* SKYMEM message dispatch: by message ID, then by function code with a length check. */
#ifndef SKYMEM_DISPATCH_H
#define SKYMEM_DISPATCH_H

#include "cfe.h"

void SKYMEM_TaskPipe(const CFE_SB_Buffer_t *SBBufPtr);
void SKYMEM_ProcessGroundCommand(const CFE_SB_Buffer_t *SBBufPtr);
bool SKYMEM_VerifyCmdLength(const CFE_MSG_Message_t *MsgPtr, size_t ExpectedLength);

#endif
