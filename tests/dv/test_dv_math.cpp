// Pure parts of the real-device backend. Every expectation is computed by hand in the comment
// beside it from the rule cited in dv_math.hpp, not by calling the code under test.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include <rdmx/dv/dv_math.hpp>

namespace rdmx::dv {
namespace {

using mlx5::ConnectInfo;
using mlx5::QpState;

TEST(DvMath, NextPow2) {
  EXPECT_EQ(next_pow2(0), 1u);
  EXPECT_EQ(next_pow2(1), 1u);
  EXPECT_EQ(next_pow2(3), 4u);
  EXPECT_EQ(next_pow2(1024), 1024u);
  EXPECT_EQ(next_pow2(1025), 2048u);
  EXPECT_TRUE(is_pow2(64));
  EXPECT_FALSE(is_pow2(0));
  EXPECT_FALSE(is_pow2(96));
}

TEST(DvMath, UmrWqebbs) {
  // DS = 8 + align4(N); WQEBBs = ceil(DS / 4).
  EXPECT_EQ(umr_wqebbs(0), 2u);  // 8 DS (invalidate-sized)
  EXPECT_EQ(umr_wqebbs(1), 3u);  // 8 + 4 = 12 DS
  EXPECT_EQ(umr_wqebbs(4), 3u);  // 12 DS
  EXPECT_EQ(umr_wqebbs(5), 4u);  // 8 + 8 = 16 DS
  EXPECT_EQ(umr_wqebbs(8), 4u);
  EXPECT_EQ(umr_wqebbs(16), 6u);   // 24 DS
  EXPECT_EQ(umr_wqebbs(52), 15u);  // 60 DS
}

TEST(DvMath, SqWqebbsFor) {
  EXPECT_EQ(sq_wqebbs_for(64, 52), 1024u);  // 64 * 15 = 960 -> 1024
  EXPECT_EQ(sq_wqebbs_for(16, 4), 64u);     // 16 * 3 = 48 -> 64
  EXPECT_EQ(sq_wqebbs_for(1, 1), 4u);       // 3 -> 4
}

TEST(DvMath, MaxInlineDataForKlm) {
  // 16 * align4(N) - 4 (rdma-core: N <= (max_inline_data + 4) / 16).
  EXPECT_EQ(max_inline_data_for_klm(0), 0u);
  EXPECT_EQ(max_inline_data_for_klm(1), 60u);
  EXPECT_EQ(max_inline_data_for_klm(4), 60u);
  EXPECT_EQ(max_inline_data_for_klm(5), 124u);
  EXPECT_EQ(max_inline_data_for_klm(52), 828u);
  // And rdma-core's own cap then admits exactly align4(N) KLMs: (828 + 4) / 16 = 52.
  EXPECT_EQ((max_inline_data_for_klm(52) + 4) / 16, 52u);
}

TEST(DvMath, RdmaCoreWqeBytes) {
  // overhead 192; gather = 192 + 16 * sge; inline = 192 + align16(4 + inline); round to 64.
  EXPECT_EQ(rdma_core_wqe_bytes(828, 1), 1024u);  // 192 + 832
  EXPECT_EQ(rdma_core_wqe_bytes(60, 1), 256u);    // 192 + 64
  EXPECT_EQ(rdma_core_wqe_bytes(124, 1), 320u);   // 192 + 128
  EXPECT_EQ(rdma_core_wqe_bytes(0, 1), 256u);     // 208 -> 256
  EXPECT_EQ(rdma_core_wqe_bytes(0, 4), 256u);     // 256
  EXPECT_EQ(rdma_core_wqe_bytes(0, 5), 320u);     // 272 -> 320
  // The largest inline UMR (960 bytes, 15 WQEBBs) fits the 1024-byte stride.
  EXPECT_GE(rdma_core_wqe_bytes(max_inline_data_for_klm(52), 1), 128u + 16 * 52);
}

TEST(DvMath, MaxSendWrFor) {
  EXPECT_EQ(max_send_wr_for(1024, 1024), 64u);  // 65536 / 1024
  EXPECT_EQ(max_send_wr_for(1024, 320), 204u);  // 204 * 320 = 65280 -> rounds up to 65536
  EXPECT_EQ(max_send_wr_for(8, 256), 2u);       // 512 = 2 * 256
  EXPECT_EQ(max_send_wr_for(2, 192), 0u);       // 128 bytes < two WQEs
  EXPECT_EQ(max_send_wr_for(4, 0), 0u);
  // Property: rdma-core's roundup_pow2(wr * wqe) gives back the ring we asked for.
  for (uint32_t ring : {4u, 64u, 1024u, 32768u})
    for (uint32_t w : {64u, 192u, 256u, 320u, 1024u}) {
      const uint32_t wr = max_send_wr_for(ring, w);
      if (wr == 0) continue;
      EXPECT_EQ(next_pow2(wr * w) / 64, ring) << ring << " " << w;
    }
}

TEST(DvMath, MaxInlineKlmFor) {
  EXPECT_EQ(max_inline_klm_for(1024), 52u);  // (1024 - 192) / 16 = 52
  EXPECT_EQ(max_inline_klm_for(512), 20u);   // 320 / 16 = 20
  EXPECT_EQ(max_inline_klm_for(256), 4u);    // 64 / 16 = 4
  EXPECT_EQ(max_inline_klm_for(300), 4u);    // 108 / 16 = 6 -> 4
  EXPECT_EQ(max_inline_klm_for(192), 0u);
  EXPECT_EQ(max_inline_klm_for(0), 0u);
  EXPECT_EQ(max_inline_klm_for(2048), 52u);  // 116, capped by the 6-bit DS field
}

TEST(DvMath, CqSizing) {
  EXPECT_EQ(cq_cqes_for(0, 0), 2u);
  EXPECT_EQ(cq_cqes_for(1, 0), 2u);
  EXPECT_EQ(cq_cqes_for(100, 27), 128u);
  EXPECT_EQ(cq_cqes_for(100, 28), 256u);   // 128 completions + the spare entry
  EXPECT_EQ(ibv_cqe_arg_for(4096), 4095);  // rdma-core: roundup_pow2(4095 + 1) = 4096
}

TEST(DvMath, AccessTranslation) {
  using namespace mlx5;
  EXPECT_EQ(to_ibv_access(0), 0);
  EXPECT_EQ(to_ibv_access(kAccessLocalWrite | kAccessRemoteRead),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(to_ibv_access(kAccessAll), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  EXPECT_FALSE(to_ibv_access(kAccessRemoteWrite).has_value());   // needs LOCAL_WRITE
  EXPECT_FALSE(to_ibv_access(kAccessRemoteAtomic).has_value());  // needs LOCAL_WRITE
  EXPECT_FALSE(to_ibv_access(0x20).has_value());                 // unknown bit
  EXPECT_EQ(to_ibv_access(kAccessLocalWrite | kAccessMwBind),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  EXPECT_EQ(from_ibv_access(IBV_ACCESS_MW_BIND), uint32_t{kAccessMwBind});
  EXPECT_EQ(from_ibv_access(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE),
            kAccessRemoteWrite | kAccessLocalWrite);
  EXPECT_EQ(from_ibv_access(IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_REMOTE_READ),
            uint32_t{kAccessRemoteRead});
  for (uint32_t a = 0; a <= kAccessAll; ++a)
    if (auto f = to_ibv_access(a)) {
      EXPECT_EQ(from_ibv_access(*f), a);
    }
}

TEST(DvMath, QpStateTranslation) {
  EXPECT_EQ(to_ibv_qp_state(QpState::kReset), IBV_QPS_RESET);
  EXPECT_EQ(to_ibv_qp_state(QpState::kInit), IBV_QPS_INIT);
  EXPECT_EQ(to_ibv_qp_state(QpState::kRtr), IBV_QPS_RTR);
  EXPECT_EQ(to_ibv_qp_state(QpState::kRts), IBV_QPS_RTS);
  EXPECT_EQ(to_ibv_qp_state(QpState::kError), IBV_QPS_ERR);
  for (QpState s : {QpState::kReset, QpState::kInit, QpState::kRtr, QpState::kRts, QpState::kError})
    EXPECT_EQ(from_ibv_qp_state(to_ibv_qp_state(s)), s);
  EXPECT_EQ(from_ibv_qp_state(IBV_QPS_SQE), QpState::kError);
  EXPECT_FALSE(from_ibv_qp_state(IBV_QPS_SQD).has_value());
  EXPECT_FALSE(from_ibv_qp_state(IBV_QPS_UNKNOWN).has_value());
}

TEST(DvMath, Mtu) {
  EXPECT_EQ(mtu_from_bytes(1024), IBV_MTU_1024);
  EXPECT_EQ(mtu_from_bytes(4096), IBV_MTU_4096);
  EXPECT_FALSE(mtu_from_bytes(1500).has_value());
  EXPECT_EQ(mtu_bytes(IBV_MTU_256), 256u);
  EXPECT_EQ(mtu_bytes(IBV_MTU_2048), 2048u);
}

TEST(DvMath, InitTransition) {
  QpParams p;
  p.port = 2;
  p.pkey_index = 3;
  const QpTransition t = init_transition(p);
  EXPECT_EQ(t.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(t.attr.port_num, 2);
  EXPECT_EQ(t.attr.pkey_index, 3);
  EXPECT_EQ(t.attr.qp_access_flags,
            unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ});
  EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

TEST(DvMath, RtrTransitionInfiniBand) {
  QpParams p;
  p.mtu = IBV_MTU_4096;
  p.max_dest_rd_atomic = 8;
  ConnectInfo r;
  r.qpn = 0xff123456;  // bits above 24 are not a QPN
  r.psn = 0x00abcdef;
  r.lid = 0x0017;
  const QpTransition t = rtr_transition(p, r);
  EXPECT_EQ(t.attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(t.attr.dest_qp_num, 0x123456u);
  EXPECT_EQ(t.attr.rq_psn, 0xabcdefu);
  EXPECT_EQ(t.attr.path_mtu, IBV_MTU_4096);
  EXPECT_EQ(t.attr.max_dest_rd_atomic, 8);
  EXPECT_EQ(t.attr.min_rnr_timer, 12);
  EXPECT_EQ(t.attr.ah_attr.dlid, 0x17);
  EXPECT_EQ(t.attr.ah_attr.is_global, 0);
  EXPECT_EQ(t.attr.ah_attr.port_num, 1);
  EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

// Path MTU and READ depths towards a peer: the smaller of what each side states; what the peer
// does not state (0) keeps ours. dv's connect puts these into RTR and RTS.
TEST(DvMath, NegotiatedMtuAndReadDepths) {
  QpParams p;
  p.mtu = IBV_MTU_4096;
  p.max_rd_atomic = 16;
  p.max_dest_rd_atomic = 16;
  ConnectInfo r;
  r.path_mtu = IBV_MTU_1024;
  r.initiator_depth = 8;      // the peer reads at most 8 from us: our responder resources
  r.responder_resources = 4;  // the peer serves 4 of ours: our initiator depth
  const QpParams n = negotiated_params(p, r);
  const QpTransition rtr = rtr_transition(n, r);
  const QpTransition rts = rts_transition(n, 0);
  EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(rtr.attr.max_dest_rd_atomic, 8);
  EXPECT_EQ(rts.attr.max_rd_atomic, 4);
  const QpParams same = negotiated_params(p, ConnectInfo{});  // a peer that states nothing
  EXPECT_EQ(same.mtu, IBV_MTU_4096);
  EXPECT_EQ(same.max_rd_atomic, 16);
  EXPECT_EQ(same.max_dest_rd_atomic, 16);
  r.path_mtu = IBV_MTU_4096;
  p.mtu = IBV_MTU_2048;
  EXPECT_EQ(negotiated_params(p, r).mtu, IBV_MTU_2048) << "ours is the smaller";
}

// rdma_cm's REQ/REP depths bound what the peer's connect info states (0 = unstated).
TEST(DvMath, CmDepthsBoundTheNegotiation) {
  ConnectInfo r;
  r.initiator_depth = 16;
  r.responder_resources = 16;
  const ConnectInfo f = fold_cm_depths(r, /*cm resp*/ 8, /*cm init*/ 4, 16, 16);
  EXPECT_EQ(f.initiator_depth, 8);      // we serve 8 of the peer's READs
  EXPECT_EQ(f.responder_resources, 4);  // we send at most 4
  const ConnectInfo g = fold_cm_depths(ConnectInfo{}, 0, 0, 2, 3);
  EXPECT_EQ(g.initiator_depth, 2);
  EXPECT_EQ(g.responder_resources, 3);
  QpParams p;
  const QpParams n = negotiated_params(p, f);
  EXPECT_EQ(rtr_transition(n, f).attr.max_dest_rd_atomic, 8);
  EXPECT_EQ(rts_transition(n, 0).attr.max_rd_atomic, 4);
}

// The QP sends from the device, port and GID the rdma_cm route names, or the connection is
// refused with what to change.
TEST(DvMath, RouteMustMatchTheQpsDevicePortAndGid) {
  PathEnd route;
  route.device = "mlx5_0";
  route.port = 1;
  const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  std::memcpy(route.gid, v4, 16);
  PathEnd qp = route;
  EXPECT_TRUE(match_route(route, qp, 3).ok());
  EXPECT_EQ(gid_text(v4), "::ffff:10.0.0.1");

  qp.device = "mlx5_1";
  auto s = match_route(route, qp, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("through mlx5_0 but the QP lives on mlx5_1"), std::string::npos)
      << s.error().message;

  qp = route;
  qp.port = 2;
  s = match_route(route, qp, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("open the device on port 1"), std::string::npos)
      << s.error().message;

  qp = route;
  qp.gid[15] = 2;  // the device's first RoCE v2 GID is another address of the port
  s = match_route(route, qp, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("from GID ::ffff:10.0.0.1 (index 3) of mlx5_0 port 1 but the "
                                   "QP sends from ::ffff:10.0.0.2; open the device with GID "
                                   "index 3"),
            std::string::npos)
      << s.error().message;
  s = match_route(route, qp, -1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("choose the GID index"), std::string::npos);
}

TEST(DvMath, RtrTransitionRoce) {
  QpParams p;
  p.use_grh = true;
  p.sgid_index = 3;
  p.traffic_class = 106;
  ConnectInfo r;
  for (int i = 0; i < 16; ++i) r.gid[i] = static_cast<uint8_t>(0xa0 + i);
  const QpTransition t = rtr_transition(p, r);
  EXPECT_EQ(t.attr.ah_attr.is_global, 1);
  EXPECT_EQ(t.attr.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(t.attr.ah_attr.grh.hop_limit, 64);
  EXPECT_EQ(t.attr.ah_attr.grh.traffic_class, 106);
  EXPECT_EQ(t.attr.ah_attr.grh.dgid.raw[0], 0xa0);
  EXPECT_EQ(t.attr.ah_attr.grh.dgid.raw[15], 0xaf);
}

TEST(DvMath, RtsAndStateOnlyTransitions) {
  QpParams p;
  p.max_rd_atomic = 4;
  const QpTransition t = rts_transition(p, 0x01000005);  // PSN is 24 bits
  EXPECT_EQ(t.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(t.attr.sq_psn, 5u);
  EXPECT_EQ(t.attr.timeout, 18);  // rdma_cm's RoCE default (mlx5::RcTimers)
  EXPECT_EQ(t.attr.retry_cnt, 7);
  EXPECT_EQ(t.attr.rnr_retry, 7);
  EXPECT_EQ(t.attr.max_rd_atomic, 4);
  // A QP's own timers (QpConfig::timers) reach RTR and RTS.
  mlx5::RcTimers tm;
  tm.timeout = 10;
  tm.retry_cnt = 2;
  tm.rnr_retry = 3;
  tm.min_rnr_timer = 5;
  const QpParams q = with_timers(p, tm);
  const QpTransition tq = rts_transition(q, 5);
  EXPECT_EQ(tq.attr.timeout, 10);
  EXPECT_EQ(tq.attr.retry_cnt, 2);
  EXPECT_EQ(tq.attr.rnr_retry, 3);
  EXPECT_EQ(rtr_transition(q, mlx5::ConnectInfo{}).attr.min_rnr_timer, 5);
  EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  const QpTransition r = state_only_transition(QpState::kReset);
  EXPECT_EQ(r.attr.qp_state, IBV_QPS_RESET);
  EXPECT_EQ(r.mask, IBV_QP_STATE);
  EXPECT_EQ(state_only_transition(QpState::kError).attr.qp_state, IBV_QPS_ERR);
}

TEST(DvMath, IfcGet) {
  // dword 0 = 0x12345678: bits 0..3 = 0x1, bits 4..11 = 0x23, bits 28..31 = 0x8.
  const uint8_t b[8] = {0x12, 0x34, 0x56, 0x78, 0x80, 0, 0, 0x01};
  EXPECT_EQ(ifc_get(b, 0, 4), 0x1u);
  EXPECT_EQ(ifc_get(b, 4, 8), 0x23u);
  EXPECT_EQ(ifc_get(b, 28, 4), 0x8u);
  EXPECT_EQ(ifc_get(b, 0, 32), 0x12345678u);
  EXPECT_EQ(ifc_get(b, 32, 1), 1u);  // MSB of dword 1
  EXPECT_EQ(ifc_get(b, 63, 1), 1u);  // LSB of dword 1
  EXPECT_EQ(ifc_get(b, 64, 8), 0u);  // past the buffer
}

TEST(DvMath, QueryHcaCapMailboxes) {
  uint8_t in[hca::kCmdInBytes];
  std::memset(in, 0xee, sizeof in);
  encode_query_hca_cap(in);
  const uint8_t want_in[16] = {0x01, 0x00, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(0, std::memcmp(in, want_in, sizeof in));

  // Output: 16-byte header, then cmd_hca_cap. Byte positions computed from the bit offsets:
  //   log_max_qp_sz   0x88  -> cap byte 17            log_max_cq_sz 0xc8 -> cap byte 25
  //   log_max_klm_list_size 0x11a (6 b) -> cap byte 35 bits 5:0
  //   umr_modify_atomic_disabled 0x208 -> cap byte 65 bit 7
  //   umr_indirect_mkey_disabled 0x209 -> cap byte 65 bit 6
  //   umr_fence 0x20a (2 b) -> cap byte 65 bits 5:4
  //   max_wqe_sz_sq 0x290 (16 b) -> cap bytes 82..83
  std::vector<uint8_t> out(hca::kCmdOutHeaderBytes + hca::kCapBytes, 0);
  uint8_t* cap = out.data() + hca::kCmdOutHeaderBytes;
  cap[17] = 0x10;         // 2^16 WQEBBs
  cap[25] = 0x16;         // 2^22 CQEs
  cap[35] = 0xc0 | 0x10;  // neighbours set (must be masked off), log_max_klm_list_size 16
  cap[65] = 0x80 | 0x10;  // atomic disabled, umr_fence = 1 (small)
  cap[82] = 0x04;         // max_wqe_sz_sq = 0x0400
  auto h = decode_query_hca_cap(out);
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ(h.value().log_max_qp_sz, 16u);
  EXPECT_EQ(h.value().log_max_cq_sz, 22u);
  EXPECT_EQ(h.value().log_max_klm_list_size, 16u);
  EXPECT_TRUE(h.value().umr_modify_atomic_disabled);
  EXPECT_FALSE(h.value().umr_indirect_mkey_disabled);
  EXPECT_EQ(h.value().umr_fence, 1u);
  EXPECT_EQ(h.value().max_wqe_sz_sq, 1024u);

  out[0] = 0x05;  // status
  out[4] = 0x12, out[5] = 0x34, out[6] = 0x56, out[7] = 0x78;
  auto e = decode_query_hca_cap(out);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("status 5"), std::string::npos);
  EXPECT_NE(e.error().message.find("0x12345678"), std::string::npos);
  EXPECT_FALSE(decode_query_hca_cap(std::span<const uint8_t>(out.data(), 20)).ok());
}

TEST(DvMath, UmrFenceAndCaps) {
  EXPECT_EQ(umr_fence_bits(0), 0x60);  // strong ordering
  EXPECT_EQ(umr_fence_bits(1), 0x20);  // initiator small
  EXPECT_EQ(umr_fence_bits(2), 0x00);  // none
  EXPECT_EQ(umr_fence_bits(3), 0x60);  // unknown -> strongest

  mlx5::DeviceCaps c;
  HcaCaps h;
  h.log_max_klm_list_size = 16;  // 65536, but max_entries is 16 bits, rounded to 4
  h.max_wqe_sz_sq = 1024;
  h.umr_fence = 2;
  apply_hca_caps(h, c);
  EXPECT_EQ(c.max_klm_list, 65532u);
  EXPECT_EQ(c.max_inline_klm, 52u);
  EXPECT_EQ(c.umr_fence, 2) << "DeviceCaps keeps the raw cap (2 = none)";
  EXPECT_EQ(mlx5::prm::umr_fence_bits(c.umr_fence), 0);
  EXPECT_FALSE(c.umr_modify_atomic_disabled);
  EXPECT_EQ(c.max_wqe_sz_sq, 1024u);
  h.umr_modify_atomic_disabled = true;
  apply_hca_caps(h, c);
  EXPECT_TRUE(c.umr_modify_atomic_disabled) << "the window layer reads it from DeviceCaps";

  h.log_max_klm_list_size = 3;  // 8 KLMs: inline capped by the window size
  apply_hca_caps(h, c);
  EXPECT_EQ(c.max_klm_list, 8u);
  EXPECT_EQ(c.max_inline_klm, 8u);

  mlx5::DeviceCaps d;
  apply_default_hca_caps(d);
  EXPECT_EQ(d.max_klm_list, 128u);
  EXPECT_EQ(d.max_inline_klm, 20u);  // (512 - 192) / 16
  EXPECT_EQ(d.umr_fence, 0) << "unknown caps: raw 0 = strong ordering";
  EXPECT_EQ(mlx5::prm::umr_fence_bits(d.umr_fence), 0x60);
  EXPECT_TRUE(d.umr_modify_atomic_disabled) << "unknown caps: no atomic bit in UMR masks";
}

TEST(DvMath, PickRoceGid) {
  GidEntry t[4];
  t[0] = {0, 1, IBV_GID_TYPE_ROCE_V1, {0xfe, 0x80}};  // link-local v1
  t[1] = {1, 1, IBV_GID_TYPE_ROCE_V2, {0xfe, 0x80}};  // link-local v2
  t[2] = {2, 2, IBV_GID_TYPE_ROCE_V2, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}};
  t[3] = {3, 1, IBV_GID_TYPE_ROCE_V2, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2}};
  EXPECT_EQ(pick_roce_gid(t, 1), 3u);  // IPv4-mapped v2 on port 1
  EXPECT_EQ(pick_roce_gid(t, 2), 2u);
  EXPECT_EQ(pick_roce_gid(std::span(t, 2), 1), 1u);  // first v2
  EXPECT_EQ(pick_roce_gid(std::span(t, 1), 1), 0u);  // first of the port
  EXPECT_FALSE(pick_roce_gid(t, 3).has_value());
}

TEST(DvMath, NoDeviceMessage) {
  const std::string m = no_device_message("mlx5_0", {}, 0);
  EXPECT_EQ(m,
            "no RDMA device found: looked for \"mlx5_0\" (ibv_get_device_list returned 0 "
            "devices; is the mlx5_ib kernel module loaded and /dev/infiniband present?)");
  const std::string names[] = {"rxe0"};
  const std::string m2 = no_device_message("", names, 0);
  EXPECT_NE(m2.find("any mlx5 device"), std::string::npos);
  EXPECT_NE(m2.find("returned 1 device: rxe0"), std::string::npos);
}

TEST(DvMath, SysfsParsing) {
  EXPECT_EQ(parse_numa_node("0\n"), 0);
  EXPECT_EQ(parse_numa_node("1"), 1);
  EXPECT_EQ(parse_numa_node("-1\n"), -1);
  EXPECT_EQ(parse_numa_node(""), -1);
  EXPECT_EQ(parse_numa_node("node0"), -1);
  EXPECT_EQ(trim("  0000:3b:00.0\n"), "0000:3b:00.0");
}

// A kernel without MKEY_UPDATE_TAG is no reason to refuse windows: the flag is left out and the
// window layer's UMRs still change the key.
TEST(DvMath, WindowMkeyFlags) {
  EXPECT_EQ(window_mkey_flags(true, false), uint32_t{MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                                                     MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG});
  EXPECT_EQ(window_mkey_flags(false, false), uint32_t{MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT});
  EXPECT_EQ(window_mkey_flags(false, true),
            uint32_t{MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                     MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE});
}

// ---- rdma_cm route parameters (rdma_init_qp_attr's RTR and RTS answers) ------------------------

namespace {
// An RTR answer as Linux core/cm.c cm_init_qp_rtr_attr gives it for a RoCE connection.
ibv_qp_attr cm_rtr(int& mask) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = 0x123;  // not adopted: the connect info's
  a.rq_psn = 0x777;       // not adopted: the connect info's
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 0;  // the kernel's value for RC (cm_init_qp_rtr_attr)
  a.ah_attr.sl = 3;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.hop_limit = 2;
  a.ah_attr.grh.traffic_class = 96;
  for (int i = 0; i < 16; ++i) a.ah_attr.grh.dgid.raw[i] = static_cast<uint8_t>(0xd0 + i);
  mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return a;
}
ibv_qp_attr cm_rts(int& mask) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 5;
  a.rnr_retry = 6;
  a.sq_psn = 0x999;
  a.max_rd_atomic = 4;
  mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
         IBV_QP_MAX_QP_RD_ATOMIC;
  return a;
}
}  // namespace

TEST(DvMath, CmRouteAdoptedIntoTransitions) {
  int rm = 0, sm = 0;
  const ibv_qp_attr rtr = cm_rtr(rm), rts = cm_rts(sm);
  auto r = cm_route_from_attrs(rtr, rm, rts, sm);
  ASSERT_TRUE(r.ok()) << r.error().message;
  QpParams dev;  // DvOptions defaults: mtu 1024, sl 0, hop 64, tclass 0, timers 18/7/7/12
  dev.use_grh = true;
  dev.sgid_index = 3;
  const QpParams p = apply_cm_route(dev, r.value());
  mlx5::ConnectInfo remote;
  remote.qpn = 0x456;
  remote.psn = 0x42;
  remote.gid[0] = 0xfe;  // what the peer wrote; the route's DGID replaces it
  const mlx5::ConnectInfo routed = apply_cm_dgid(remote, r.value());
  const QpTransition t = rtr_transition(p, routed);
  EXPECT_EQ(t.attr.path_mtu, IBV_MTU_4096);
  EXPECT_EQ(t.attr.ah_attr.sl, 3);
  EXPECT_EQ(t.attr.ah_attr.grh.hop_limit, 2);
  EXPECT_EQ(t.attr.ah_attr.grh.traffic_class, 96);
  EXPECT_EQ(t.attr.ah_attr.grh.dgid.raw[0], 0xd0);
  EXPECT_EQ(t.attr.ah_attr.grh.dgid.raw[15], 0xdf);
  EXPECT_EQ(t.attr.ah_attr.grh.sgid_index, 3);  // ours: check_route proved it is the route's
  EXPECT_EQ(t.attr.min_rnr_timer, 0);
  EXPECT_EQ(t.attr.dest_qp_num, 0x456u);  // QPN and PSN: the connect info's, not the CM's
  EXPECT_EQ(t.attr.rq_psn, 0x42u);
  const QpTransition u = rts_transition(p, 5);
  EXPECT_EQ(u.attr.timeout, 14);
  EXPECT_EQ(u.attr.retry_cnt, 5);
  EXPECT_EQ(u.attr.rnr_retry, 6);
  EXPECT_EQ(u.attr.sq_psn, 5u);
  // A QP's own timers (QpConfig::timers) are applied over the route.
  mlx5::RcTimers tm;
  tm.timeout = 9;
  EXPECT_EQ(rts_transition(with_timers(p, tm), 5).attr.timeout, 9);
}

TEST(DvMath, CmRouteKeepsTheDscpOfTheDeviceOptions) {
  int rm = 0, sm = 0;
  const ibv_qp_attr rtr = cm_rtr(rm), rts = cm_rts(sm);
  auto r = cm_route_from_attrs(rtr, rm, rts, sm);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r.value().global);
  ASSERT_EQ(r.value().traffic_class, 96);  // rdma_cm's (its ToS)
  QpParams dev;
  dev.use_grh = true;
  dev.traffic_class = 46 << 2;  // DSCP 46 (expedited forwarding) set in DvOptions
  const QpParams p = apply_cm_route(dev, r.value());
  EXPECT_EQ(p.traffic_class, 46 << 2);
  EXPECT_EQ(rtr_transition(p, apply_cm_dgid({}, r.value())).attr.ah_attr.grh.traffic_class,
            46 << 2);
  EXPECT_EQ(p.hop_limit, 2);  // the rest of the route still applies
  dev.traffic_class = 0;      // none set: rdma_cm's stands
  EXPECT_EQ(apply_cm_route(dev, r.value()).traffic_class, 96);
}

TEST(DvMath, CmRouteOnlyFieldsTheMaskMarksValid) {
  int rm = 0, sm = 0;
  ibv_qp_attr rtr = cm_rtr(rm), rts = cm_rts(sm);
  QpParams dev;
  dev.use_grh = true;
  dev.hop_limit = 64;
  dev.traffic_class = 8;
  dev.sl = 1;
  // No AV, MTU or RNR timer in the RTR mask; no timers in the RTS mask: the device's values.
  auto r = cm_route_from_attrs(rtr, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, rts,
                               IBV_QP_STATE | IBV_QP_SQ_PSN);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r.value().have_av);
  const QpParams p = apply_cm_route(dev, r.value());
  EXPECT_EQ(p.mtu, dev.mtu);
  EXPECT_EQ(p.sl, 1);
  EXPECT_EQ(p.hop_limit, 64);
  EXPECT_EQ(p.traffic_class, 8);
  EXPECT_EQ(p.min_rnr_timer, 12);
  EXPECT_EQ(p.timeout, 18);
  EXPECT_EQ(p.retry_cnt, 7);
  EXPECT_EQ(p.rnr_retry, 7);
  mlx5::ConnectInfo remote;
  remote.gid[0] = 0xfe;
  EXPECT_EQ(apply_cm_dgid(remote, r.value()).gid[0], 0xfe);
  // An AV without a GRH (InfiniBand inside the subnet): SL only, the GRH fields stay.
  rtr.ah_attr.is_global = 0;
  auto ib = cm_route_from_attrs(rtr, IBV_QP_STATE | IBV_QP_AV, rts, sm);
  ASSERT_TRUE(ib.ok());
  const QpParams q = apply_cm_route(dev, ib.value());
  EXPECT_EQ(q.sl, 3);
  EXPECT_EQ(q.hop_limit, 64);
  EXPECT_EQ(q.traffic_class, 8);
  EXPECT_EQ(apply_cm_dgid(remote, ib.value()).gid[0], 0xfe);
  EXPECT_EQ(q.timeout, 14);  // the RTS mask had the timers
}

TEST(DvMath, CmRouteRefusesWhatNoDeviceAccepts) {
  int rm = 0, sm = 0;
  ibv_qp_attr rtr = cm_rtr(rm), rts = cm_rts(sm);
  rtr.path_mtu = static_cast<ibv_mtu>(7);
  auto a = cm_route_from_attrs(rtr, rm, rts, sm);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("path MTU 7"), std::string::npos) << a.error().message;
  rtr = cm_rtr(rm);
  rts.retry_cnt = 8;
  auto b = cm_route_from_attrs(rtr, rm, rts, sm);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("retry_cnt 8"), std::string::npos) << b.error().message;
  rts = cm_rts(sm);
  rtr.qp_state = IBV_QPS_INIT;  // an answer for another state
  EXPECT_FALSE(cm_route_from_attrs(rtr, rm, rts, sm).ok());
  // An unset mask bit makes a bad value irrelevant.
  rtr = cm_rtr(rm);
  rtr.path_mtu = static_cast<ibv_mtu>(7);
  EXPECT_TRUE(cm_route_from_attrs(rtr, rm & ~IBV_QP_PATH_MTU, rts, sm).ok());
}

}  // namespace
}  // namespace rdmx::dv
