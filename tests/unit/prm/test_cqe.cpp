#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include <rdmx/mlx5/prm/cqe.hpp>

namespace prm = rdmx::mlx5::prm;

TEST(Cqe, EverySyndromeHasADistinctName) {
  const uint8_t all[] = {MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,
                         MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
                         MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,
                         MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
                         MLX5_CQE_SYNDROME_MW_BIND_ERR,
                         MLX5_CQE_SYNDROME_BAD_RESP_ERR,
                         MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR,
                         MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
                         MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
                         MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
                         MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR,
                         MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
                         MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR};
  std::set<std::string> names;
  for (uint8_t s : all) {
    const auto n = prm::syndrome_name(s);
    EXPECT_NE(n, "unknown") << int(s);
    names.emplace(n);
  }
  EXPECT_EQ(names.size(), std::size(all));
  EXPECT_EQ(prm::syndrome_name(0x13), "remote-access");
  EXPECT_EQ(prm::syndrome_name(0x05), "flushed");
  EXPECT_EQ(prm::syndrome_name(0x77), "unknown");
}

TEST(Cqe, RequesterCqeBytes) {
  alignas(64) mlx5_cqe64 c;
  prm::CqeFields f;
  f.opcode = MLX5_CQE_REQ;
  f.send_opcode = MLX5_OPCODE_RDMA_READ;
  f.qpn = 0x0abcde;
  f.wqe_counter = 0x1234;
  f.byte_cnt = 0x1000;
  prm::write_cqe(&c, f, 1);
  const auto* b = reinterpret_cast<const uint8_t*>(&c);
  // byte_cnt at 44, sop_drop_qpn at 56, wqe_counter at 60, op_own at 63 (mlx5dv.h layout).
  EXPECT_EQ(b[44], 0);
  EXPECT_EQ(b[46], 0x10);
  EXPECT_EQ(b[47], 0);
  EXPECT_EQ(b[56], 0x10);
  EXPECT_EQ(b[57], 0x0a);
  EXPECT_EQ(b[58], 0xbc);
  EXPECT_EQ(b[59], 0xde);
  EXPECT_EQ(b[60], 0x12);
  EXPECT_EQ(b[61], 0x34);
  EXPECT_EQ(b[63], 0x01);  // opcode REQ (0) << 4 | owner 1
  EXPECT_EQ(prm::cqe_opcode(&c), MLX5_CQE_REQ);
  EXPECT_EQ(prm::cqe_send_opcode(&c), MLX5_OPCODE_RDMA_READ);
  EXPECT_EQ(prm::cqe_qpn(&c), 0x0abcdeu);
  EXPECT_EQ(prm::cqe_wqe_counter(&c), 0x1234);
  EXPECT_EQ(prm::cqe_byte_cnt(&c), 0x1000u);
}

TEST(Cqe, ErrorCqeBytes) {
  alignas(64) mlx5_cqe64 c;
  prm::CqeFields f;
  f.opcode = MLX5_CQE_REQ_ERR;
  f.send_opcode = MLX5_OPCODE_UMR;
  f.qpn = 7;
  f.wqe_counter = 9;
  f.syndrome = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
  f.vendor_syndrome = 0x88;
  prm::write_cqe(&c, f, 0);
  const auto* b = reinterpret_cast<const uint8_t*>(&c);
  // mlx5_err_cqe: vendor_err_synd at 54, syndrome at 55, s_wqe_opcode_qpn at 56.
  EXPECT_EQ(b[54], 0x88);
  EXPECT_EQ(b[55], 0x13);
  EXPECT_EQ(b[56], 0x25);
  EXPECT_EQ(b[59], 7);
  EXPECT_EQ(b[63], 0xd0);  // REQ_ERR (13) << 4 | owner 0
  EXPECT_TRUE(prm::cqe_is_error(&c));
  EXPECT_EQ(prm::cqe_syndrome(&c), 0x13);
  EXPECT_EQ(prm::cqe_vendor_syndrome(&c), 0x88);
}

TEST(Cqe, OwnershipFollowsWrapParity) {
  alignas(64) mlx5_cqe64 c;
  std::memset(&c, 0, sizeof(c));
  c.op_own = MLX5_CQE_INVALID << 4;
  EXPECT_FALSE(prm::cqe_is_sw_owned(&c, 0, 8)) << "an initialised CQE is never valid";
  prm::CqeFields f;
  prm::write_cqe(&c, f, 0);  // first pass: owner 0
  EXPECT_TRUE(prm::cqe_is_sw_owned(&c, 0, 8));
  EXPECT_FALSE(prm::cqe_is_sw_owned(&c, 8, 8)) << "stale CQE from the previous pass";
  prm::write_cqe(&c, f, 1);  // second pass: owner 1
  EXPECT_TRUE(prm::cqe_is_sw_owned(&c, 8, 8));
  EXPECT_FALSE(prm::cqe_is_sw_owned(&c, 16, 8));
}

TEST(Cqe, OpcodeAndFenceNames) {
  EXPECT_EQ(prm::wqe_opcode_name(MLX5_OPCODE_UMR), "UMR");
  EXPECT_EQ(prm::wqe_opcode_name(MLX5_OPCODE_SEND_INVAL), "SEND_INVAL");
  EXPECT_EQ(prm::cqe_opcode_name(MLX5_CQE_RESP_SEND_INV), "RESP_SEND_INV");
  EXPECT_EQ(prm::fence_name(0x28), "initiator-small");
  EXPECT_EQ(prm::fence_name(0x60), "strong-ordering");
  EXPECT_EQ(prm::fence_name(0x80), "small-and-fence");
}
