#include "common/types.h"

#include <catch2/catch.hpp>

using namespace hora;

TEST_CASE("one-shot names: transfers' and unnamed calls', not names that repeat") {
  CHECK(IsOneShotName("hora.p2p.0>1.t7.12"));
  CHECK(IsOneShotName("allreduce.noname.0"));
  CHECK(IsOneShotName("broadcast.noname.123"));
  CHECK(IsOneShotName("allreduce.c10d.0.barrier.noname.5"));
  CHECK(IsOneShotName("allreduce.c10d.0.allreduce_coalesced.noname.5.1"));
  CHECK_FALSE(IsOneShotName("allreduce.noname.sync"));    // a blocking unnamed call's: repeats
  CHECK_FALSE(IsOneShotName("allreduce.noname.sync.2"));  // the same after a failure
  CHECK_FALSE(IsOneShotName("allreduce.noname."));
  CHECK_FALSE(IsOneShotName("allreduce.grad.7"));
  CHECK_FALSE(IsOneShotName("allreduce.c10d.0.allreduce.float32.4.3"));
  CHECK_FALSE(IsOneShotName("p2p.0>1"));
}
