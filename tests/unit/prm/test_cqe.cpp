#include <gtest/gtest.h>
#include <rdmx/mlx5/prm/cqe.hpp>
TEST(Cqe, Placeholder) { EXPECT_EQ(rdmx::mlx5::prm::syndrome_name(0x13), "remote-access"); }
