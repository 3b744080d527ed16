/*
 * SKYMEM eviction gossip. An EVICT_BLOCK with radius r > 0 is sent on with
 * radius r-1 to the north, south, west and east neighbours. The packets are
 * handed to ISL_ROUTER on SKYMEM_ISL_OUT_MID, which sends them over the ISL.
 * A short memory of (block, evict_id) stops the same eviction from circling
 * the torus.
 */
#include "skymem.h"
#include "skymem_auth_app.h"
#include "skymem_gossip.h"
#include "skymem_utils.h"

#include "skymem_router.h"

bool SKYMEM_GossipFirstSeen(const uint8 Hash[SKYMEM_BLOCK_HASH_LEN], uint32 EvictId)
{
    SKYMEM_SeenEviction_t *Entry;
    uint32                 i;

    for (i = 0; i < SKYMEM_GOSSIP_MEMORY; i++)
    {
        Entry = &SKYMEM_Data.Seen[i];
        if (Entry->Used && Entry->EvictId == EvictId && memcmp(Entry->BlockHash, Hash, SKYMEM_BLOCK_HASH_LEN) == 0)
        {
            return false;
        }
    }

    /* Oldest entry is overwritten (ring). */
    Entry = &SKYMEM_Data.Seen[SKYMEM_Data.SeenNext];
    SKYMEM_Data.SeenNext = (SKYMEM_Data.SeenNext + 1u) % SKYMEM_GOSSIP_MEMORY;
    memcpy(Entry->BlockHash, Hash, SKYMEM_BLOCK_HASH_LEN);
    Entry->EvictId = EvictId;
    Entry->Used    = true;
    return true;
}

void SKYMEM_GossipForward(const uint8 Hash[SKYMEM_BLOCK_HASH_LEN], uint32 EvictId, uint8 Radius)
{
    static const skymem_dir_t Dirs[4] = {SKYMEM_DIR_NORTH, SKYMEM_DIR_SOUTH, SKYMEM_DIR_WEST, SKYMEM_DIR_EAST};
    uint32                    Sent[4][2];
    uint32                    NumSent = 0;
    uint32                    NPlane;
    uint32                    NSat;
    uint32                    d;
    uint32                    k;
    bool                      Duplicate;
    skymem_route_t            Route;
    int                       Len;

    for (d = 0; d < 4; d++)
    {
        skymem_neighbour(SKYMEM_Data.Planes, SKYMEM_Data.SatsPerPlane, SKYMEM_Data.Plane, SKYMEM_Data.Sat, Dirs[d],
                         &NPlane, &NSat);

        /* On a grid 1 or 2 wide, several directions reach the same satellite (or us). */
        Duplicate = SKYMEM_IsMe((uint16)NPlane, (uint16)NSat);
        for (k = 0; k < NumSent && !Duplicate; k++)
        {
            Duplicate = (Sent[k][0] == NPlane && Sent[k][1] == NSat);
        }
        if (Duplicate)
        {
            continue;
        }
        Sent[NumSent][0] = NPlane;
        Sent[NumSent][1] = NSat;
        NumSent++;

        memset(&Route, 0, sizeof(Route));
        Route.dst_plane  = (uint16_t)NPlane;
        Route.dst_sat    = (uint16_t)NSat;
        Route.src_plane  = SKYMEM_Data.Plane;
        Route.src_sat    = SKYMEM_Data.Sat;
        Route.via_plane  = SKYMEM_NO_SAT;
        Route.via_sat    = SKYMEM_NO_SAT;
        Route.request_id = EvictId;
        Route.ttl        = SKYMEM_DEFAULT_TTL;
        Route.flags      = SKYMEM_RF_GOSSIP;

        Len = skymem_build_evict(SKYMEM_Data.Scratch, sizeof(SKYMEM_Data.Scratch), SKYMEM_Data.SeqCount++, &Route,
                                 Hash, EvictId, Radius);
        Len = SKYMEM_AuthSign(SKYMEM_Data.Scratch, Len, sizeof(SKYMEM_Data.Scratch)); /* key 0 when keys are on */
        SKYMEM_PublishToRouter(SKYMEM_Data.Scratch, Len);
    }
}
