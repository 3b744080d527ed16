/*
 * SKYMEM coverage tests (cFE unit-test framework).
 *
 * The software bus, events, tables and OSAL are stubs; packets are built and
 * checked with the real skymem_core codec, and chunks live in a real store.
 * A reply "published" by SKYMEM lands in a buffer the test hands to the
 * CFE_SB_AllocateMessageBuffer stub, where the test parses it.
 */
#include "skymem.h"
#include "skymem_auth_app.h"
#include "skymem_cmds.h"
#include "skymem_config.h"
#include "skymem_data.h"
#include "skymem_dispatch.h"
#include "skymem_utils.h"

#include "skymem_auth.h"
#include "skymem_codec.h"
#include "skymem_crc32c.h"

#include "cfe_psp.h"
#include "utassert.h"
#include "utstubs.h"
#include "uttest.h"

/* SB buffers the test owns (aligned like real ones). */
typedef union
{
    CFE_SB_Buffer_t Sb;
    uint8           Bytes[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_CHUNK_DESC_LEN + 8192];
} UT_Packet_t;

#define UT_MAX_REPLIES 6
static UT_Packet_t      UT_In;
static UT_Packet_t      UT_Out[UT_MAX_REPLIES];
static CFE_SB_Buffer_t *UT_OutPtrs[UT_MAX_REPLIES];

static const SKYMEM_ConstellationTbl_t UT_GoodTable = {
    .Planes = 3, .SatsPerPlane = 3, .AltitudeM = 550000, .InclinationMilliDeg = 53000,
    .IslPortBase = 21000, .GroundPortBase = 41000, .MemoryBudgetKB = 1024, .ChunkSize = 6144,
    .FirstCpuId = 1, .HostCount = 1, .Hosts = {"127.0.0.1"}};

/* ---- helpers ---------------------------------------------------------------- */

static void UT_SetMsg(CFE_SB_MsgId_Atom_t Mid, CFE_MSG_FcnCode_t Cc, CFE_MSG_Size_t Size)
{
    /* Two of each: an error path asks for the ID and code again for its event text. */
    CFE_SB_MsgId_t    MsgId[2] = {CFE_SB_ValueToMsgId(Mid), CFE_SB_ValueToMsgId(Mid)};
    CFE_MSG_FcnCode_t Code[2]  = {Cc, Cc};

    /* Drop what an earlier message left unread, so each getter returns this message's value. */
    UT_ResetState(UT_KEY(CFE_MSG_GetMsgId));
    UT_ResetState(UT_KEY(CFE_MSG_GetFcnCode));
    UT_ResetState(UT_KEY(CFE_MSG_GetSize));
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetMsgId), MsgId, sizeof(MsgId), true);
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetFcnCode), Code, sizeof(Code), true);
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetSize), &Size, sizeof(Size), true);
}

/* Gives the AllocateMessageBuffer stub UT_MAX_REPLIES buffers to hand out. */
static void UT_ExpectReplies(void)
{
    int i;

    UT_ResetState(UT_KEY(CFE_SB_AllocateMessageBuffer));
    memset(UT_Out, 0, sizeof(UT_Out));
    for (i = 0; i < UT_MAX_REPLIES; i++)
    {
        UT_OutPtrs[i] = &UT_Out[i].Sb;
    }
    UT_SetDataBuffer(UT_KEY(CFE_SB_AllocateMessageBuffer), UT_OutPtrs, sizeof(UT_OutPtrs), false);
}

/* This satellite is (0,1) of a 3x3 grid with a 1 MiB store. */
static void UT_Satellite(void)
{
    memset(&SKYMEM_Data, 0, sizeof(SKYMEM_Data));
    SKYMEM_Data.Planes       = 3;
    SKYMEM_Data.SatsPerPlane = 3;
    SKYMEM_Data.Plane        = 0;
    SKYMEM_Data.Sat          = 1;
    SKYMEM_Data.Time.TimeScale = 1.0;
    SKYMEM_CoreSetup();
    UtAssert_INT32_EQ(SKYMEM_CreateStore(1u << 20, 6144), CFE_SUCCESS);
}

static void UT_Teardown(void)
{
    if (SKYMEM_Data.Store != NULL)
    {
        skymem_store_destroy(SKYMEM_Data.Store);
        SKYMEM_Data.Store = NULL;
    }
}

static skymem_route_t UT_FromGround(uint16 Plane, uint16 Sat, uint32 RequestId)
{
    skymem_route_t R;

    memset(&R, 0, sizeof(R));
    R.dst_plane  = Plane;
    R.dst_sat    = Sat;
    R.src_plane  = SKYMEM_GROUND_PLANE;
    R.src_sat    = 7;
    R.via_plane  = 0;
    R.via_sat    = 0;
    R.request_id = RequestId;
    R.ttl        = SKYMEM_DEFAULT_TTL;
    return R;
}

/* Feeds a built data-plane packet to SKYMEM. */
static void UT_Deliver(int Len)
{
    UtAssert_True(Len > 0, "packet built (%d)", Len);
    UT_SetMsg(SKYMEM_DATA_CMD_MID, UT_In.Bytes[6] & 0x7F, (CFE_MSG_Size_t)Len);
    SKYMEM_TaskPipe(&UT_In.Sb);
}

static void UT_ParseReply(int Index, skymem_msg_t *Msg)
{
    size_t Len = skymem_get_u16(UT_Out[Index].Bytes + 4) + 7u;

    UtAssert_INT32_EQ(skymem_parse(UT_Out[Index].Bytes, Len, Msg), SKYMEM_OK);
    UtAssert_UINT32_EQ(Msg->mid, SKYMEM_REPLY_TLM_MID);
}

/* ---- tests ------------------------------------------------------------------ */

static void Test_TableValidation(void)
{
    SKYMEM_ConstellationTbl_t Tbl = UT_GoodTable;

    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_SUCCESS);

    Tbl.Planes = 0;
    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_STATUS_VALIDATION_FAILURE);
    Tbl = UT_GoodTable;
    Tbl.IslPortBase = 65530; /* 9 satellites do not fit below 65536 */
    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_STATUS_VALIDATION_FAILURE);
    Tbl = UT_GoodTable;
    Tbl.ChunkSize = SKYMEM_SB_MAX_CHUNK + 1; /* a DATA reply would not fit one SB message */
    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_STATUS_VALIDATION_FAILURE);
    Tbl = UT_GoodTable;
    memset(Tbl.Hosts[0], 'x', sizeof(Tbl.Hosts[0])); /* not terminated */
    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_STATUS_VALIDATION_FAILURE);
    Tbl = UT_GoodTable;
    Tbl.MemoryBudgetKB = 0;
    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_STATUS_VALIDATION_FAILURE);
    Tbl = UT_GoodTable;
    Tbl.FirstCpuId = 0;
    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_STATUS_VALIDATION_FAILURE);
    Tbl = UT_GoodTable;
    Tbl.HostCount = 2; /* the second host's address is empty */
    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_STATUS_VALIDATION_FAILURE);
    Tbl = UT_GoodTable;
    Tbl.HostCount = 10; /* more machines than the 9 satellites */
    UtAssert_INT32_EQ(SKYMEM_TblValidationFunc(&Tbl), CFE_STATUS_VALIDATION_FAILURE);

    UtAssert_STUB_COUNT(CFE_EVS_SendEvent, 8);
}

static void Test_ControlCommands(void)
{
    SKYMEM_SetParamCmd_t SetParam;

    UT_Satellite();

    /* NOOP of the right length counts; of the wrong length is an error. */
    UT_SetMsg(SKYMEM_CMD_MID, SKYMEM_NOOP_CC, sizeof(SKYMEM_NoopCmd_t));
    SKYMEM_TaskPipe(&UT_In.Sb);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.cmd_count, 1);
    UT_SetMsg(SKYMEM_CMD_MID, SKYMEM_NOOP_CC, sizeof(SKYMEM_NoopCmd_t) + 1);
    SKYMEM_TaskPipe(&UT_In.Sb);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.cmd_count, 1);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.err_count, 1);

    /* SET_PARAM chunk size 4096 (big-endian payload) rebuilds the store. */
    memset(&SetParam, 0, sizeof(SetParam));
    skymem_put_u16(SetParam.Payload.ParamId, SKYMEM_PARAM_CHUNK_SIZE);
    skymem_put_u32(SetParam.Payload.Value, 4096);
    UT_SetMsg(SKYMEM_CMD_MID, SKYMEM_SET_PARAM_CC, sizeof(SKYMEM_SetParamCmd_t));
    SKYMEM_TaskPipe((CFE_SB_Buffer_t *)&SetParam);
    UtAssert_UINT32_EQ(SKYMEM_Data.ChunkSize, 4096);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.cmd_count, 2);

    /* Link-emulation parameters are not supported on cFS. */
    skymem_put_u16(SetParam.Payload.ParamId, SKYMEM_PARAM_LOSS_PPM);
    UT_SetMsg(SKYMEM_CMD_MID, SKYMEM_SET_PARAM_CC, sizeof(SKYMEM_SetParamCmd_t));
    SKYMEM_TaskPipe((CFE_SB_Buffer_t *)&SetParam);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.err_count, 2);

    /* Unknown function code. */
    UT_SetMsg(SKYMEM_CMD_MID, 42, sizeof(SKYMEM_NoopCmd_t));
    SKYMEM_TaskPipe(&UT_In.Sb);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.err_count, 3);

    /* RESET_COUNTERS */
    UT_SetMsg(SKYMEM_CMD_MID, SKYMEM_RESET_COUNTERS_CC, sizeof(SKYMEM_ResetCountersCmd_t));
    SKYMEM_TaskPipe(&UT_In.Sb);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.cmd_count, 0);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.err_count, 0);

    UT_Teardown();
}

static void Test_SetGetChunk(void)
{
    skymem_route_t      Route = UT_FromGround(0, 1, 1234);
    skymem_chunk_desc_t Desc;
    skymem_msg_t        Reply;
    uint8               Data[1000];
    uint32              i;

    UT_Satellite();
    for (i = 0; i < sizeof(Data); i++)
    {
        Data[i] = (uint8)(i * 7u);
    }
    memset(&Desc, 0, sizeof(Desc));
    memset(Desc.block_hash, 0xAB, sizeof(Desc.block_hash));
    Desc.chunk_id    = 3;
    Desc.chunk_count = 4;
    Desc.created_ms  = 99;
    Desc.crc32c      = skymem_crc32c(Data, sizeof(Data));
    Desc.data_len    = sizeof(Data);

    /* SET_CHUNK -> ACK back to the ground station through the via satellite. */
    UT_ExpectReplies();
    UT_Deliver(skymem_build_set_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 1, &Route, &Desc, Data));
    UT_ParseReply(0, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_ACK);
    UtAssert_UINT32_EQ(Reply.reply_chunk_id, 3);
    UtAssert_UINT32_EQ(Reply.route.request_id, 1234);
    UtAssert_UINT32_EQ(Reply.route.dst_plane, SKYMEM_GROUND_PLANE);
    UtAssert_UINT32_EQ(Reply.route.dst_sat, 7);
    UtAssert_UINT32_EQ(Reply.route.src_sat, 1);
    UtAssert_UINT32_EQ(Reply.route.via_sat, 0);

    /* GET_CHUNK -> DATA with the same bytes and descriptor. */
    UT_ExpectReplies();
    Route.request_id = 1235;
    UT_Deliver(skymem_build_get_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 2, &Route, Desc.block_hash, 3));
    UT_ParseReply(0, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_DATA);
    UtAssert_UINT32_EQ(Reply.desc.data_len, sizeof(Data));
    UtAssert_UINT32_EQ(Reply.desc.chunk_count, 4);
    UtAssert_MemCmp(Reply.data, Data, sizeof(Data), "chunk data comes back unchanged");

    /* PROBE of a missing chunk -> NAK NOT_FOUND. */
    UT_ExpectReplies();
    UT_Deliver(skymem_build_probe(UT_In.Bytes, sizeof(UT_In.Bytes), 3, &Route, Desc.block_hash, 0));
    UT_ParseReply(0, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_NAK);
    UtAssert_UINT32_EQ(Reply.reply_status, SKYMEM_NAK_NOT_FOUND);

    /* Corrupted data -> NAK BAD_CRC, nothing stored. */
    UT_ExpectReplies();
    Desc.chunk_id = 2;
    Desc.crc32c ^= 1u;
    UT_Deliver(skymem_build_set_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 4, &Route, &Desc, Data));
    UT_ParseReply(0, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_status, SKYMEM_NAK_BAD_CRC);

    /* Headers intact but the body one byte short -> NAK BAD_LENGTH. */
    {
        int Len = skymem_build_get_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 6, &Route, Desc.block_hash, 3) - 1;

        skymem_put_u16(UT_In.Bytes + 4, (uint16)(Len - 7));
        skymem_cmd_finalize(UT_In.Bytes, (size_t)Len);
        UT_ExpectReplies();
        UT_Deliver(Len);
        UT_ParseReply(0, &Reply);
        UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_NAK);
        UtAssert_UINT32_EQ(Reply.reply_status, SKYMEM_NAK_BAD_LENGTH);
        UtAssert_UINT32_EQ(Reply.route.request_id, 1235);
    }

    /* Fields docs/PROTOCOL.md refuses (the core's parser decides, as on the native node): a chunk id
     * beyond the block's chunk count, descriptor flags no version defines, a route reserved byte,
     * EVICT_BLOCK spare bytes -> NAK BAD_PARAM, nothing stored or purged. */
    {
        skymem_store_info_t Info;
        uint32              ChunksBefore;
        int                 Case;

        skymem_store_info(SKYMEM_Data.Store, &Info);
        ChunksBefore = Info.chunks;
        for (Case = 0; Case < 4; Case++)
        {
            skymem_chunk_desc_t Bad = Desc;
            int                 Len;

            Bad.crc32c = skymem_crc32c(Data, sizeof(Data));
            if (Case == 0)
            {
                Bad.chunk_id = 5; /* of 4 */
            }
            if (Case == 1)
            {
                Bad.flags = 0xFF;
            }
            Len = (Case == 3) ? skymem_build_evict(UT_In.Bytes, sizeof(UT_In.Bytes), 7, &Route, Desc.block_hash, 1, 0)
                              : skymem_build_set_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 7, &Route, &Bad, Data);
            if (Case == 2)
            {
                UT_In.Bytes[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_RESERVED] = 1;
            }
            if (Case == 3)
            {
                UT_In.Bytes[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_EV_SPARE] = 1;
            }
            skymem_cmd_finalize(UT_In.Bytes, (size_t)Len);
            UT_ExpectReplies();
            UT_Deliver(Len);
            UT_ParseReply(0, &Reply);
            UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_NAK);
            UtAssert_UINT32_EQ(Reply.reply_status, SKYMEM_NAK_BAD_PARAM);
        }
        skymem_store_info(SKYMEM_Data.Store, &Info);
        UtAssert_UINT32_EQ(Info.chunks, ChunksBefore);
    }

    /* Chunk above the configured chunk size -> NAK TOO_LARGE. */
    UtAssert_INT32_EQ(SKYMEM_CreateStore(1u << 20, 512), CFE_SUCCESS);
    UT_ExpectReplies();
    Desc.crc32c ^= 1u;
    UT_Deliver(skymem_build_set_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 5, &Route, &Desc, Data));
    UT_ParseReply(0, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_status, SKYMEM_NAK_TOO_LARGE);

    UT_Teardown();
}

static void Test_GetChunksPacedAndForeignPackets(void)
{
    skymem_route_t Route = UT_FromGround(0, 1, 77);
    uint8          Hash[SKYMEM_BLOCK_HASH_LEN];
    skymem_msg_t   Reply;

    UT_Satellite();
    memset(Hash, 0x11, sizeof(Hash));

    /* GET_CHUNKS of 3 is queued, then answered by RunJobs (all NOT_FOUND here). */
    UT_Deliver(skymem_build_get_chunks(UT_In.Bytes, sizeof(UT_In.Bytes), 1, &Route, Hash, 0, 3, 1));
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.n_jobs, 1);
    UT_ExpectReplies();
    skymem_sat_run_jobs(&SKYMEM_Data.Core, 2);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.n_jobs, 1); /* one left after a budget of 2 */
    skymem_sat_run_jobs(&SKYMEM_Data.Core, 2);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.n_jobs, 0);
    UT_ParseReply(2, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_chunk_id, 2);
    UtAssert_STUB_COUNT(OS_CountSemTimedWait, 3); /* one credit per reply */

    /* A packet for another satellite is not served. */
    UT_ResetState(UT_KEY(CFE_SB_AllocateMessageBuffer));
    Route.dst_sat = 2;
    UT_Deliver(skymem_build_get_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 2, &Route, Hash, 0));
    UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 0);
    UtAssert_UINT32_EQ(SKYMEM_Data.Invalid, 1);

    /* A malformed packet (one byte short of its length field) is counted, not served. */
    Route.dst_sat = 1;
    UT_Deliver(skymem_build_get_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 3, &Route, Hash, 0) - 1);
    UtAssert_UINT32_EQ(SKYMEM_Data.Invalid, 2);
    UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 0);

    /* No credit from ISL_ROUTER: the reply is dropped, not sent. */
    UT_SetDefaultReturnValue(UT_KEY(OS_CountSemTimedWait), OS_ERROR_TIMEOUT);
    UT_Deliver(skymem_build_get_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 4, &Route, Hash, 0));
    UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 0);
    UtAssert_UINT32_EQ(SKYMEM_Data.TxCreditTimeouts, 1);

    UT_Teardown();
}

static void Test_EvictGossip(void)
{
    skymem_route_t Route = UT_FromGround(0, 1, 5);
    uint8          Hash[SKYMEM_BLOCK_HASH_LEN];

    UT_Satellite();
    memset(Hash, 0x22, sizeof(Hash));

    /* EVICT radius 1 from the ground: ACK + 4 gossip packets (distinct neighbours on 3x3). */
    UT_ExpectReplies();
    UT_Deliver(skymem_build_evict(UT_In.Bytes, sizeof(UT_In.Bytes), 1, &Route, Hash, 11, 1));
    UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 5);
    UtAssert_STUB_COUNT(CFE_MSG_Init, 4); /* gossip is wrapped in SKYMEM_ISL_OUT_MID */

    UT_Teardown();
}

static void Test_LruEviction(void)
{
    skymem_chunk_meta_t Victim;
    skymem_msg_t        Reply;
    uint8               Hash[SKYMEM_BLOCK_HASH_LEN];

    UT_Satellite();
    memset(Hash, 0x33, sizeof(Hash));
    memset(&Victim, 0, sizeof(Victim));
    Victim.gossip_radius = 2;
    Victim.origin_ground = 7;
    Victim.ingress_plane = 0;
    Victim.ingress_sat   = 0;

    /* Gossip to the 4 neighbours (wrapped for ISL_ROUTER), then EVICTED to station 7 via (0,0). */
    UT_ExpectReplies();
    skymem_sat_store_evicted(&SKYMEM_Data.Core, Hash, &Victim, 12);
    UtAssert_STUB_COUNT(CFE_MSG_Init, 4);
    UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 5);
    UT_ParseReply(4, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_EVICTED);
    UtAssert_UINT32_EQ(Reply.reply_value, 12);
    UtAssert_UINT32_EQ(Reply.route.dst_sat, 7);
    UtAssert_UINT32_EQ(Reply.route.request_id, 0);
    UtAssert_MemCmp(Reply.block_hash, Hash, sizeof(Hash), "evicted block named");

    /* A chunk that knows no ground station (migrated from an older satellite) is gossiped but not announced. */
    Victim.origin_ground = SKYMEM_NO_SAT;
    UT_ExpectReplies();
    skymem_sat_store_evicted(&SKYMEM_Data.Core, Hash, &Victim, 1);
    UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 4);

    UT_Teardown();
}

static void Test_Migrate(void)
{
    skymem_route_t      Route = UT_FromGround(0, 1, 500);
    skymem_route_t      AckRoute;
    skymem_chunk_meta_t Meta;
    skymem_msg_t        Out;
    skymem_msg_t        Ack;
    uint8               Hash[SKYMEM_BLOCK_HASH_LEN];
    uint8               Data[64];
    uint8               AckPkt[128];
    int                 Len;

    UT_Satellite();
    memset(Hash, 0x44, sizeof(Hash));
    memset(Data, 0x99, sizeof(Data));
    memset(&Meta, 0, sizeof(Meta));
    Meta.chunk_count   = 2;
    Meta.origin_ground = 7; /* set by ground station 7 through satellite (0,0) */
    Meta.ingress_plane = 0;
    Meta.ingress_sat   = 0;
    UtAssert_INT32_EQ(skymem_store_set(SKYMEM_Data.Store, Hash, 0, &Meta, Data, sizeof(Data)), SKYMEM_STORE_OK);
    UtAssert_INT32_EQ(skymem_store_set(SKYMEM_Data.Store, Hash, 1, &Meta, Data, sizeof(Data)), SKYMEM_STORE_OK);

    /* MIGRATE chunks 0..1 to (0,2): two SET_CHUNKs (flag MIGRATION) go out wrapped for ISL_ROUTER. */
    UT_ExpectReplies();
    UT_Deliver(skymem_build_migrate(UT_In.Bytes, sizeof(UT_In.Bytes), 1, &Route, Hash, 0, 2, 1, 0, 2));
    UtAssert_STUB_COUNT(CFE_MSG_Init, 2);
    UtAssert_UINT32_EQ(skymem_sat_migrations_active(&SKYMEM_Data.Core), 1);
    Len = (int)skymem_get_u16(UT_Out[0].Bytes + 8 + 4) + 7;
    UtAssert_INT32_EQ(skymem_parse(UT_Out[0].Bytes + 8, (size_t)Len, &Out), SKYMEM_OK);
    UtAssert_UINT32_EQ(Out.cc, SKYMEM_SET_CHUNK_CC);
    UtAssert_UINT32_EQ(Out.route.dst_sat, 2);
    UtAssert_True((Out.route.flags & SKYMEM_RF_MIGRATION) != 0, "MIGRATION flag set");
    /* the chunk's ground station travels with it (origin record), so its eviction there is announced */
    UtAssert_True(Out.has_origin, "origin record carried");
    UtAssert_UINT32_EQ(Out.origin.ground, 7);
    UtAssert_UINT32_EQ(Out.origin.via_sat, 0);

    /* The target ACKs both: our copies go, the requester gets ACK value 2. */
    memset(&AckRoute, 0, sizeof(AckRoute));
    AckRoute.dst_plane = 0;
    AckRoute.dst_sat   = 1;
    AckRoute.src_plane = 0;
    AckRoute.src_sat   = 2;
    AckRoute.via_plane = SKYMEM_NO_SAT;
    AckRoute.via_sat   = SKYMEM_NO_SAT;
    AckRoute.ttl       = 60;
    AckRoute.request_id = Out.route.request_id;
    Len = skymem_build_reply(AckPkt, sizeof(AckPkt), 1, 0, 0, &AckRoute, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 0, 1,
                             Hash, sizeof(Hash));
    UtAssert_INT32_EQ(skymem_parse(AckPkt, (size_t)Len, &Ack), SKYMEM_OK);
    skymem_sat_on_reply(&SKYMEM_Data.Core, &Ack, AckPkt, (size_t)Len);
    skymem_sat_on_reply(&SKYMEM_Data.Core, &Ack, AckPkt, (size_t)Len); /* a duplicate changes nothing */
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.migrated_out, 1);
    AckRoute.request_id = Out.route.request_id + 1; /* chunk index 1 of the same job */
    skymem_build_reply(AckPkt, sizeof(AckPkt), 2, 0, 0, &AckRoute, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 1, 1, Hash,
                       sizeof(Hash));
    UtAssert_INT32_EQ(skymem_parse(AckPkt, (size_t)Len, &Ack), SKYMEM_OK);
    skymem_sat_on_reply(&SKYMEM_Data.Core, &Ack, AckPkt, (size_t)Len);

    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.migrated_out, 2);
    UtAssert_UINT32_EQ(skymem_sat_migrations_active(&SKYMEM_Data.Core), 0);
    UtAssert_INT32_EQ(skymem_store_peek(SKYMEM_Data.Store, Hash, 0, NULL, NULL, NULL), SKYMEM_STORE_E_NOT_FOUND);
    UT_ParseReply(2, &Out);
    UtAssert_UINT32_EQ(Out.reply_kind, SKYMEM_REPLY_ACK);
    UtAssert_UINT32_EQ(Out.reply_cc, SKYMEM_MIGRATE_CC);
    UtAssert_UINT32_EQ(Out.reply_value, 2);
    UtAssert_UINT32_EQ(Out.route.request_id, 500);

    /* A target outside the grid: NAK NO_ROUTE at once. */
    UT_ExpectReplies();
    UT_Deliver(skymem_build_migrate(UT_In.Bytes, sizeof(UT_In.Bytes), 2, &Route, Hash, 0, 2, 1, 5, 0));
    UT_ParseReply(0, &Out);
    UtAssert_UINT32_EQ(Out.reply_status, SKYMEM_NAK_NO_ROUTE);

    UT_Teardown();
}

static const char UT_TwoHosts[] = "first-cpuid = 11\nhosts = 10.0.0.5, 10.0.0.6\nbind = 10.0.0.5\n";
static const char UT_BadHosts[] = "hosts = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17\n";

static void Test_ConfigFile(void)
{
    static const char          Text[] = "# launcher\nplanes = 4\nsats = 6\nplane = 0\nsat = 1\nmemory-budget = 2097152\n"
                                        "isl-port-base = 23000\nground-port-base = 43000\nbind = 10.0.0.2\n"
                                        "loss = 0.1\nepoch-ms = 1000\ntime-scale = 2.0\n";
    static const char          Bad[]  = "planes = 0\n";
    SKYMEM_ConstellationTbl_t  Tbl    = UT_GoodTable;
    SKYMEM_TimeConfig_t        Time   = {false, 0, 1.0};
    bool                       Applied;

    UT_SetDefaultReturnValue(UT_KEY(CFE_PSP_GetProcessorId), 2); /* index 1 = (0,1) */
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)Text, sizeof(Text) - 1, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_SUCCESS);
    UtAssert_True(Applied, "file applied");
    UtAssert_UINT32_EQ(Tbl.Planes, 4);
    UtAssert_UINT32_EQ(Tbl.SatsPerPlane, 6);
    UtAssert_UINT32_EQ(Tbl.MemoryBudgetKB, 2048);
    UtAssert_UINT32_EQ(Tbl.IslPortBase, 23000);
    UtAssert_UINT32_EQ(Tbl.GroundPortBase, 43000);
    UtAssert_StrCmp(Tbl.Hosts[0], "10.0.0.2", "bind address");
    UtAssert_UINT32_EQ(Tbl.HostCount, 1);
    UtAssert_True(Time.HaveEpoch && Time.EpochMs == 1000 && Time.TimeScale == 2.0, "mission time settings");

    /* Spread over two machines, cpuids from 11: cpuid 12 is index 1 = (0,1), on the first machine. */
    Tbl = UT_GoodTable;
    UT_SetDefaultReturnValue(UT_KEY(CFE_PSP_GetProcessorId), 12);
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)UT_TwoHosts, sizeof(UT_TwoHosts) - 1, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_SUCCESS);
    UtAssert_UINT32_EQ(Tbl.FirstCpuId, 11);
    UtAssert_UINT32_EQ(Tbl.HostCount, 2);
    UtAssert_StrCmp(Tbl.Hosts[1], "10.0.0.6", "second machine");
    UtAssert_UINT32_EQ(SKYMEM_HOST_OF(1, 9, 2), 0);
    UtAssert_UINT32_EQ(SKYMEM_HOST_OF(5, 9, 2), 1);

    /* ... but binding the other machine's address is a launch mistake. */
    Tbl = UT_GoodTable;
    UT_SetDefaultReturnValue(UT_KEY(CFE_PSP_GetProcessorId), 17); /* index 6, second machine */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)UT_TwoHosts, sizeof(UT_TwoHosts) - 1, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);

    /* Seventeen machines, or something that is not an address, are bad values. */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)UT_BadHosts, sizeof(UT_BadHosts) - 1, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);
    UT_SetDefaultReturnValue(UT_KEY(CFE_PSP_GetProcessorId), 2);

    /* A bad value stops the app. */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)Bad, sizeof(Bad) - 1, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);

    /* A key neither runtime knows (a misspelling) is refused, not skipped; so is a line without '='. */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)"plnaes = 3\n", 11, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)"planes 3\n", 9, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);
    /* Ranges are the core's, as on the node: a stopped clock, a 1 km orbit, a bind that is not an address. */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)"time-scale = 0\n", 15, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)"altitude-km = 1\n", 16, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)"bind = host\n", 12, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);

    /* A file naming another satellite than the cpuid is refused. */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)"sats = 3\nplane = 2\nsat = 2\n", 25, false);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);

    /* A file that is there but cannot be opened is refused. */
    UT_SetDeferredRetcode(UT_KEY(OS_OpenCreate), 1, OS_ERROR);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_STATUS_VALIDATION_FAILURE);

    /* No file: nothing changes, and nothing tries to open it (OSAL would print the failed open). */
    UT_ResetState(UT_KEY(OS_OpenCreate));
    UT_SetDefaultReturnValue(UT_KEY(OS_stat), OS_FS_ERR_PATH_INVALID);
    UtAssert_INT32_EQ(SKYMEM_ReadConfigFile(&Tbl, &Time, &Applied), CFE_SUCCESS);
    UtAssert_True(!Applied, "no file, nothing applied");
    UtAssert_STUB_COUNT(OS_OpenCreate, 0);
}

/* /cf/skymem_auth.keys: the keys of (0,1)'s four links on the 3x3 grid and ground key 1; the forger has another
 * key 1 and nothing else (an incomplete file: refused). */
/* satellite (0,1)'s key file; the test's ground holds the same UP and DOWN keys (the sign picks by direction) */
static const char UT_Keys[] = "# test keys\nskymem-keys 4 satellite 0 1\n"
                              "link-in 0 0 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
                              "link-out 0 0 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
                              "link-in 0 2 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
                              "link-out 0 2 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
                              "link-in 1 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
                              "link-out 1 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
                              "link-in 2 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
                              "link-out 2 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"
                              "up 1 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f\n"
                              "down 1 606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f\n";
#define UT_KEYS_COUNT 10
static const char UT_ForgerKeys[] = "skymem-keys 4 satellite 0 1\n"
                                    "up 1 404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f\n";
static const char UT_OtherSatKeys[] = "skymem-keys 4 satellite 0 2\n"
                                      "link-in 0 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";

/* Builds a SET_CHUNK of 100 bytes for chunk 2 of block 0xCD.. into UT_In; signs it with Ring's key 1 if given. */
static int UT_BuildSet(const skymem_auth_t *Ring, uint64 Seq, uint32 RequestId)
{
    skymem_route_t      Route = UT_FromGround(0, 1, RequestId);
    skymem_chunk_desc_t Desc;
    uint8               Data[100];
    int                 Len;

    memset(Data, 0x5A, sizeof(Data));
    memset(&Desc, 0, sizeof(Desc));
    memset(Desc.block_hash, 0xCD, sizeof(Desc.block_hash));
    Desc.chunk_id    = 2;
    Desc.chunk_count = 4;
    Desc.crc32c      = skymem_crc32c(Data, sizeof(Data));
    Desc.data_len    = sizeof(Data);
    Len = skymem_build_set_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 1, &Route, &Desc, Data);
    if (Ring != NULL && Len > 0)
    {
        Len = skymem_auth_sign(Ring, 1, Seq, UT_In.Bytes, (size_t)Len, sizeof(UT_In.Bytes));
    }
    return Len;
}

/* A refused command is counted and not answered: an unauthenticated sender gets nothing signed back. */
static void UT_ExpectRefused(uint32 Failures)
{
    UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 0);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.auth_failures, Failures);
}

static void Test_Auth(void)
{
    static skymem_auth_t Ground, Forger;
    static UT_Packet_t   Saved;
    SKYMEM_SetParamCmd_t SetParam;
    skymem_route_t       Route = UT_FromGround(0, 1, 50);
    skymem_msg_t         Reply;
    uint8                Hash[SKYMEM_BLOCK_HASH_LEN];
    char                 Err[96];
    uint32               Commands;
    int                  Len;
    uint64               T; /* sequences: just past the floor the stub clock gives, within the ahead bound */

    UT_Satellite();
    memset(Hash, 0xCD, sizeof(Hash));
    skymem_auth_init(&Ground, 0);
    skymem_auth_init(&Forger, 0);
    UtAssert_INT32_EQ(skymem_auth_load_text(&Ground, UT_Keys, sizeof(UT_Keys) - 1, Err, sizeof(Err)), UT_KEYS_COUNT);
    UtAssert_INT32_EQ(skymem_auth_load_text(&Forger, UT_ForgerKeys, sizeof(UT_ForgerKeys) - 1, Err, sizeof(Err)), 1);

    /* The key file turns authentication on. */
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)UT_Keys, sizeof(UT_Keys) - 1, false);
    UtAssert_INT32_EQ(SKYMEM_AuthInit(), CFE_SUCCESS);
    T = SKYMEM_Data.Core.floor_mark + 1;

    /* Unsigned SET_CHUNK, and one signed with a wrong key: refused, counted, unanswered, nothing stored. */
    UT_ExpectReplies();
    UT_Deliver(UT_BuildSet(NULL, 0, 40));
    UT_ExpectRefused(1);
    UT_ExpectReplies();
    UT_Deliver(UT_BuildSet(&Forger, T, 41));
    UT_ExpectRefused(2);
    UtAssert_INT32_EQ(skymem_store_peek(SKYMEM_Data.Store, Hash, 2, NULL, NULL, NULL), SKYMEM_STORE_E_NOT_FOUND);

    /* Reads need a signature too (they move the LRU order and the counters): refused. */
    UT_ExpectReplies();
    UT_Deliver(skymem_build_get_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 2, &Route, Hash, 2));
    UT_ExpectRefused(3);

    /* Signed with the ground key: ACK, stored; the ACK itself is signed with that key. */
    UT_ExpectReplies();
    Len = UT_BuildSet(&Ground, T + 1, 42);
    memcpy(&Saved, &UT_In, sizeof(Saved));
    UT_Deliver(Len);
    UT_ParseReply(0, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_ACK);
    UtAssert_True(Reply.auth != NULL, "the reply carries a trailer");
    UtAssert_INT32_EQ(skymem_auth_check_reply(&skymem_auth_find_key_for(&Ground, 1, SKYMEM_KEY_DOWN)->mac, 1,
                                              UT_Out[0].Bytes,
                                              skymem_get_u16(UT_Out[0].Bytes + 4) + 7u),
                      SKYMEM_AUTH_OK);
    UtAssert_INT32_EQ(skymem_store_peek(SKYMEM_Data.Store, Hash, 2, NULL, NULL, NULL), SKYMEM_STORE_OK);

    /* The same packet again is a replay: counted, dropped without a reply. */
    UT_ExpectReplies();
    memcpy(&UT_In, &Saved, sizeof(UT_In));
    UT_Deliver(Len);
    UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 0);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.auth_failures, 4);

    /* Control MID: no trailer, so NOOP and SET_PARAM are both refused and counted. */
    Commands = SKYMEM_Data.Core.c.cmd_count;
    UT_SetMsg(SKYMEM_CMD_MID, SKYMEM_NOOP_CC, sizeof(SKYMEM_NoopCmd_t));
    SKYMEM_TaskPipe(&UT_In.Sb);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.cmd_count, Commands);
    memset(&SetParam, 0, sizeof(SetParam));
    skymem_put_u16(SetParam.Payload.ParamId, SKYMEM_PARAM_CHUNK_SIZE);
    skymem_put_u32(SetParam.Payload.Value, 4096);
    UT_SetMsg(SKYMEM_CMD_MID, SKYMEM_SET_PARAM_CC, sizeof(SKYMEM_SetParamCmd_t));
    SKYMEM_TaskPipe((CFE_SB_Buffer_t *)&SetParam);
    UtAssert_UINT32_EQ(SKYMEM_Data.ChunkSize, 6144);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.cmd_count, Commands);
    UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.auth_failures, 6);

    /* A reply addressed to this satellite (a migration ACK) must be signed: an unsigned one is ignored. */
    {
        static UT_Packet_t Wrapped;
        skymem_route_t     Ack;
        int                AckLen;

        memset(&Ack, 0, sizeof(Ack));
        Ack.dst_plane  = 0;
        Ack.dst_sat    = 1;
        Ack.src_plane  = 0;
        Ack.src_sat    = 2;
        Ack.via_plane  = SKYMEM_NO_SAT;
        Ack.via_sat    = SKYMEM_NO_SAT;
        Ack.request_id = 4096u; /* job 1, chunk 0 */
        Ack.ttl        = SKYMEM_DEFAULT_TTL;
        AckLen = skymem_build_reply(Wrapped.Bytes + sizeof(CFE_MSG_CommandHeader_t),
                                    sizeof(Wrapped.Bytes) - sizeof(CFE_MSG_CommandHeader_t), 0, 0, 0, &Ack,
                                    SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 0, 1, Hash, sizeof(Hash));
        UT_SetMsg(SKYMEM_ISL_IN_MID, 0, (CFE_MSG_Size_t)(AckLen + (int)sizeof(CFE_MSG_CommandHeader_t)));
        SKYMEM_ProcessInboundReply(&Wrapped.Sb);
        UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.auth_failures, 7);
    }

    /* What was taken on the clock wrote no floor: the clock of any later start is past it. One signed ahead
     * of the clock (a quarter of the ahead bound) is kept in the floor file before it takes effect. */
    UtAssert_STUB_COUNT(OS_write, 0);
    {
        uint64 Ahead = skymem_auth_seq_at(SKYMEM_Data.Core.io->clock_us(NULL)) +
                       SKYMEM_SAT_SEQ_AHEAD_US / SKYMEM_AUTH_SEQ_US / 4u;
        UT_Deliver(UT_BuildSet(&Ground, Ahead, 45));
        UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.auth_failures, 7);
        UtAssert_True(SKYMEM_Data.Core.floor_mark > Ahead, "the kept mark is past the sequence taken ahead");
        UtAssert_STUB_COUNT(OS_write, 1);
        UtAssert_STUB_COUNT(OS_rename, 1); /* written beside the floor file, then renamed over it */

        /* Everything above came to (0,1) relayed via (0,0): ISL_ROUTER was told nothing. A verified command
         * that came up this satellite's own link (via (0,1)) tells it first, before the answer, that station
         * 7 is at the address of request 46 (SKYMEM_ISL_OUT_MID, SKYMEM_ISL_OUT_LEARN_CC): the one way a
         * keyed ISL_ROUTER learns a station's address. */
        UtAssert_STUB_COUNT(CFE_MSG_SetFcnCode, 0);
        {
            skymem_route_t Own = UT_FromGround(0, 1, 46);
            uint32         Sent = SKYMEM_Data.TxPackets;

            Own.via_sat = 1;
            UT_ExpectReplies();
            Len = skymem_build_get_chunk(UT_In.Bytes, sizeof(UT_In.Bytes), 3, &Own, Hash, 2);
            Len = skymem_auth_sign(&Ground, 1, Ahead + 1, UT_In.Bytes, (size_t)Len, sizeof(UT_In.Bytes));
            UT_Deliver(Len);
            UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.auth_failures, 7);
            UtAssert_STUB_COUNT(CFE_MSG_SetFcnCode, 1);
            UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 2);
            UtAssert_UINT32_EQ(skymem_get_u16(UT_Out[0].Bytes + sizeof(CFE_MSG_CommandHeader_t) +
                                              SKYMEM_ISL_LEARN_STATION), 7);
            UtAssert_UINT32_EQ(skymem_get_u32(UT_Out[0].Bytes + sizeof(CFE_MSG_CommandHeader_t) +
                                              SKYMEM_ISL_LEARN_REQUEST), 46);
            UT_ParseReply(1, &Reply);
            UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_DATA);
            UtAssert_UINT32_EQ(SKYMEM_Data.TxPackets, Sent + 1); /* the answer; the word to the router is no packet */

            /* The same packet again (a replay up our own link): refused, and ISL_ROUTER is told nothing. */
            UT_ExpectReplies();
            UT_Deliver(Len);
            UtAssert_UINT32_EQ(SKYMEM_Data.Core.c.auth_failures, 8);
            UtAssert_STUB_COUNT(CFE_MSG_SetFcnCode, 1);
            UtAssert_STUB_COUNT(CFE_SB_AllocateMessageBuffer, 0);
        }
    }

    /* A key file without a link's keys, an old or malformed one, or another satellite's, stops the app. */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)UT_ForgerKeys, sizeof(UT_ForgerKeys) - 1, false);
    UtAssert_INT32_EQ(SKYMEM_AuthInit(), CFE_STATUS_VALIDATION_FAILURE);
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)"0 abcd\n", 7, false);
    UtAssert_INT32_EQ(SKYMEM_AuthInit(), CFE_STATUS_VALIDATION_FAILURE);
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)UT_OtherSatKeys, sizeof(UT_OtherSatKeys) - 1, false);
    UtAssert_INT32_EQ(SKYMEM_AuthInit(), CFE_STATUS_VALIDATION_FAILURE);

    /* A key file that is there but cannot be opened stops the app rather than turn authentication off. */
    UT_SetDeferredRetcode(UT_KEY(OS_OpenCreate), 1, OS_ERROR);
    UtAssert_INT32_EQ(SKYMEM_AuthInit(), CFE_STATUS_VALIDATION_FAILURE);

    /* No replay floor file (first boot): an information event, the floor file never opened; one that is
     * there but cannot be opened: an error event. Either way the clock is the floor and auth is on. */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)UT_Keys, sizeof(UT_Keys) - 1, false);
    UT_ResetState(UT_KEY(OS_OpenCreate));
    UT_ResetState(UT_KEY(CFE_EVS_SendEvent));
    UT_SetDeferredRetcode(UT_KEY(OS_stat), 2, OS_FS_ERR_PATH_INVALID); /* the key file is there, the floor not */
    UtAssert_INT32_EQ(SKYMEM_AuthInit(), CFE_SUCCESS);
    UtAssert_STUB_COUNT(OS_OpenCreate, 1);
    UtAssert_STUB_COUNT(CFE_EVS_SendEvent, 2); /* first boot; authentication on */
    UT_ResetState(UT_KEY(OS_read));
    UT_SetDataBuffer(UT_KEY(OS_read), (void *)UT_Keys, sizeof(UT_Keys) - 1, false);
    UT_ResetState(UT_KEY(OS_OpenCreate));
    UT_ResetState(UT_KEY(CFE_EVS_SendEvent));
    UT_SetDeferredRetcode(UT_KEY(OS_OpenCreate), 2, OS_ERROR);
    UtAssert_INT32_EQ(SKYMEM_AuthInit(), CFE_SUCCESS);
    UtAssert_STUB_COUNT(OS_OpenCreate, 2);
    UtAssert_STUB_COUNT(CFE_EVS_SendEvent, 2); /* floor unreadable; authentication on */

    /* No key file: off. Unsigned SET accepted; a signed one cannot be checked and is refused. */
    UT_SetDefaultReturnValue(UT_KEY(OS_stat), OS_FS_ERR_PATH_INVALID);
    UtAssert_INT32_EQ(SKYMEM_AuthInit(), CFE_SUCCESS);
    SKYMEM_Data.Core.c.auth_failures = 0;
    UT_ExpectReplies();
    UT_Deliver(UT_BuildSet(NULL, 0, 43));
    UT_ParseReply(0, &Reply);
    UtAssert_UINT32_EQ(Reply.reply_kind, SKYMEM_REPLY_ACK);
    UT_ExpectReplies();
    UT_Deliver(UT_BuildSet(&Ground, T + 2, 44));
    UT_ExpectRefused(1);

    UT_Teardown();
}

static void Test_Housekeeping(void)
{
    skymem_stats_t Stats;

    UT_Satellite();
    SKYMEM_Data.Core.c.cmd_count = 5;
    UT_SetMsg(SKYMEM_SEND_HK_MID, 0, sizeof(SKYMEM_SendHkCmd_t));
    SKYMEM_TaskPipe(&UT_In.Sb);
    UtAssert_STUB_COUNT(CFE_SB_TransmitMsg, 1);

    skymem_stats_decode(SKYMEM_Data.HkTlm.Payload.Stats, &Stats);
    UtAssert_UINT32_EQ(Stats.cmd_count, 5);
    UtAssert_UINT32_EQ(Stats.sat, 1);
    UtAssert_True(Stats.bytes_budget > 0 && Stats.bytes_budget <= (1u << 20), "budget reported");

    UT_Teardown();
}

static void UT_ResetAll(void)
{
    UT_ResetState(0);
}

void UtTest_Setup(void)
{
    UtTest_Add(Test_TableValidation, UT_ResetAll, NULL, "table validation");
    UtTest_Add(Test_ControlCommands, UT_ResetAll, NULL, "control commands and lengths");
    UtTest_Add(Test_SetGetChunk, UT_ResetAll, NULL, "SET/GET/PROBE through the real store");
    UtTest_Add(Test_GetChunksPacedAndForeignPackets, UT_ResetAll, NULL, "GET_CHUNKS pacing, foreign and bad packets");
    UtTest_Add(Test_EvictGossip, UT_ResetAll, NULL, "EVICT_BLOCK gossip");
    UtTest_Add(Test_LruEviction, UT_ResetAll, NULL, "LRU eviction: gossip and EVICTED notice");
    UtTest_Add(Test_Migrate, UT_ResetAll, NULL, "MIGRATE: chunks handed over, deleted on ACK");
    UtTest_Add(Test_ConfigFile, UT_ResetAll, NULL, "/cf/skymemory.cfg overrides");
    UtTest_Add(Test_Auth, UT_ResetAll, NULL, "command authentication: key file, unsigned/forged/replayed refused");
    UtTest_Add(Test_Housekeeping, UT_ResetAll, NULL, "housekeeping stats");
}
