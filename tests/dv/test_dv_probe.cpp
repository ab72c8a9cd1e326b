// The real device on whatever machine runs the tests. Without an mlx5 device (this machine, CI)
// open() must fail cleanly with kNoDevice and a message naming the device; the hardware tests
// skip. With a device, the no-device tests skip and the hardware tests run a loopback bring-up.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <vector>

#include <rdmx/dv/cm.hpp>
#include <rdmx/dv/dv_device.hpp>
#include <rdmx/dv/dv_math.hpp>

namespace rdmx::dv {
namespace {

using mlx5::QpState;

bool have_mlx5() {
  return !probe().empty();
}

TEST(DvProbe, ProbeListsOnlyMlx5) {
  for (const DeviceInfo& d : probe()) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.numa_node, -1);
  }
}

TEST(DvProbe, OpenNamedDeviceFailsWithoutHardware) {
  if (have_mlx5()) GTEST_SKIP() << "an mlx5 device is present";
  auto r = DvDevice::open("mlx5_0", DvOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kNoDevice);
  EXPECT_NE(r.error().message.find("no RDMA device found"), std::string::npos);
  EXPECT_NE(r.error().message.find("\"mlx5_0\""), std::string::npos) << r.error().message;
}

TEST(DvProbe, OpenAnyDeviceFailsWithoutHardware) {
  if (have_mlx5()) GTEST_SKIP() << "an mlx5 device is present";
  auto r = DvDevice::open("", DvOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kNoDevice);
  EXPECT_NE(r.error().message.find("any mlx5 device"), std::string::npos) << r.error().message;
}

TEST(DvProbe, OpenUnknownNameAlwaysFails) {
  auto r = DvDevice::open("rdmx_no_such_device_9", DvOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kNoDevice);
  EXPECT_NE(r.error().message.find("rdmx_no_such_device_9"), std::string::npos);
}

// rdma-core would create signature QPs (any value enables them): open refuses first, on any
// machine, naming the variable.
TEST(DvProbe, OpenRefusesMlx5QpSignatureInTheEnvironment) {
  ASSERT_EQ(setenv("MLX5_QP_SIGNATURE", "0", 1), 0);
  auto r = DvDevice::open("", DvOptions{});
  unsetenv("MLX5_QP_SIGNATURE");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kUnsupported);
  EXPECT_NE(r.error().message.find("MLX5_QP_SIGNATURE"), std::string::npos) << r.error().message;
  EXPECT_EQ(env_problem(), "");
}

TEST(DvProbe, DevxPermissionHintNamesCapNetRaw) {
  EXPECT_NE(devx_permission_hint().find("CAP_NET_RAW"), std::string::npos);
  EXPECT_NE(devx_permission_hint().find("/dev/infiniband/uverbs"), std::string::npos);
}

TEST(DvProbe, CmWithoutRdmaCmFailsCleanly) {
  struct stat st;
  if (::stat("/dev/infiniband/rdma_cm", &st) == 0) GTEST_SKIP() << "rdma_cm is available";
  auto l = CmListener::listen("", 0);
  ASSERT_FALSE(l.ok());
  EXPECT_FALSE(l.error().message.empty());
}

// ---- Hardware: runs only where an mlx5 device exists (RDMX_DV_DEVICE picks one) --------------

class DvHardware : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_mlx5()) GTEST_SKIP() << "no mlx5 device: hardware test skipped";
    const char* n = std::getenv("RDMX_DV_DEVICE");
    auto r = DvDevice::open(n ? n : "", DvOptions{});
    ASSERT_TRUE(r.ok()) << r.error().message;
    dev_ = std::move(r).value();
  }
  std::unique_ptr<DvDevice> dev_;
};

TEST_F(DvHardware, CapsAreSane) {
  const auto& c = dev_->caps();
  EXPECT_GE(c.max_klm_list, 4u);
  EXPECT_GE(c.max_inline_klm, 4u);
  EXPECT_LE(c.max_inline_klm, mlx5::prm::kMaxInlineKlm);
  EXPECT_GT(c.max_sq_wqebbs, 0u);
}

TEST_F(DvHardware, RegMrAndWindows) {
  std::vector<uint8_t> buf(1 << 20);
  auto mr =
      dev_->reg_mr(buf.data(), buf.size(),
                   mlx5::kAccessLocalWrite | mlx5::kAccessRemoteRead | mlx5::kAccessRemoteWrite);
  ASSERT_TRUE(mr.ok()) << mr.error().message;
  std::vector<uint32_t> keys;
  for (int i = 0; i < 8; ++i) {
    auto k = dev_->create_window_mkey(16, false);
    ASSERT_TRUE(k.ok()) << k.error().message;
    EXPECT_EQ(k.value() & 0xff, 0u);  // tag 0 at creation
    keys.push_back(k.value());
  }
  for (uint32_t k : keys) EXPECT_TRUE(dev_->destroy_mkey(k | 0x42).ok());  // any tag
  EXPECT_TRUE(dev_->dereg_mr(mr.value()).ok());
  EXPECT_FALSE(dev_->create_window_mkey(dev_->caps().max_klm_list + 1, false).ok());
}

TEST_F(DvHardware, LoopbackConnectAndRecover) {
  mlx5::QpConfig cfg;
  cfg.sq_wqebbs = 256;
  cfg.rq_wqes = 16;
  cfg.cq_cqes = 512;
  auto a = dev_->create_qp(cfg);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = dev_->create_qp(cfg);
  ASSERT_TRUE(b.ok()) << b.error().message;
  const auto& qa = a.value();
  EXPECT_EQ(qa.sq.wqe_cnt, 256u);
  EXPECT_EQ(qa.cq.cqe_cnt, 512u);
  EXPECT_NE(qa.sq.dbrec, nullptr);
  EXPECT_NE(qa.sq.reg, nullptr);
  EXPECT_EQ(dev_->query_qp(qa.qpn).value(), QpState::kReset);

  ASSERT_TRUE(dev_->connect(qa.qpn, dev_->local_info(b.value().qpn)).ok());
  ASSERT_TRUE(dev_->connect(b.value().qpn, dev_->local_info(qa.qpn)).ok());
  EXPECT_EQ(dev_->query_qp(qa.qpn).value(), QpState::kRts);

  ASSERT_TRUE(dev_->modify_qp(qa.qpn, QpState::kError).ok());
  EXPECT_EQ(dev_->query_qp(qa.qpn).value(), QpState::kError);
  auto s = dev_->recover_qp(qa.qpn, dev_->local_info(b.value().qpn));
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(dev_->query_qp(qa.qpn).value(), QpState::kRts);

  EXPECT_TRUE(dev_->destroy_qp(qa.qpn).ok());
  EXPECT_TRUE(dev_->destroy_qp(b.value().qpn).ok());
}

}  // namespace
}  // namespace rdmx::dv
