/*
 * ISL_ROUTER housekeeping payload: 48 bytes, explicit big-endian like every
 * SkyMemory payload (offsets below, from the start of the payload).
 */
#ifndef ISL_ROUTER_MSGDEFS_H
#define ISL_ROUTER_MSGDEFS_H

#include "common_types.h"
#include "isl_router_fcncodes.h"

#define ISL_ROUTER_HK_PLANE         0u  /* u16 this satellite */
#define ISL_ROUTER_HK_SAT           2u  /* u16 */
#define ISL_ROUTER_HK_CMD_COUNT     4u  /* u32 commands accepted */
#define ISL_ROUTER_HK_ERR_COUNT     8u  /* u32 commands rejected */
#define ISL_ROUTER_HK_RX_ISL        12u /* u32 datagrams received on the ISL port */
#define ISL_ROUTER_HK_RX_GROUND     16u /* u32 datagrams received on the ground port */
#define ISL_ROUTER_HK_TX_ISL        20u /* u32 datagrams sent to neighbour satellites */
#define ISL_ROUTER_HK_TX_GROUND     24u /* u32 datagrams sent to ground stations */
#define ISL_ROUTER_HK_FORWARDED     28u /* u32 packets relayed for other satellites */
#define ISL_ROUTER_HK_DELIVERED     32u /* u32 packets handed to SKYMEM */
#define ISL_ROUTER_HK_DROPPED       36u /* u32 TTL expired, no route, unknown ground station, send error */
#define ISL_ROUTER_HK_INVALID       40u /* u32 datagrams the codec rejected */
#define ISL_ROUTER_HK_GROUND_KNOWN  44u /* u32 ground stations with a known return address */
#define ISL_ROUTER_HK_LEN           48u

typedef struct ISL_ROUTER_HkTlm_Payload
{
    uint8 Bytes[ISL_ROUTER_HK_LEN];
} ISL_ROUTER_HkTlm_Payload_t;

#endif
