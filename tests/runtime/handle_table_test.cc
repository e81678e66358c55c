#include "runtime/handle_table.h"
#include "runtime/tensor_queue.h"

#include <catch2/catch.hpp>

#include <thread>

using namespace hora;

TEST_CASE("handles: poll, wait, result, release") {
  HandleTable t;
  int64_t h = t.Create();
  REQUIRE(h > 0);
  bool done = true;
  REQUIRE(t.Poll(h, &done).ok());
  REQUIRE_FALSE(done);
  Status w = t.Wait(h, std::chrono::milliseconds(20));
  REQUIRE(w.code() == Code::kDeadlineExceeded);
  std::thread completer([&] {
    OpResult r;
    r.shape = {2, 3};
    t.Complete(h, Status::Ok(), std::move(r));
  });
  REQUIRE(t.Wait(h, std::chrono::seconds(10)).ok());
  completer.join();
  REQUIRE(t.Poll(h, &done).ok());
  REQUIRE(done);
  std::vector<int64_t> shape;
  REQUIRE(t.WithResult(h, [&](const OpResult& r) {
    shape = r.shape;
    return Status::Ok();
  }).ok());
  REQUIRE(shape == std::vector<int64_t>{2, 3});
  REQUIRE(t.Release(h).ok());
  REQUIRE(t.Release(h).code() == Code::kNotFound);
  REQUIRE(t.Poll(h, &done).code() == Code::kNotFound);
  REQUIRE(t.Wait(h, std::chrono::seconds(1)).code() == Code::kNotFound);
  REQUIRE(t.size() == 0);
}

TEST_CASE("handles: errors are returned by wait, never reused ids") {
  HandleTable t;
  int64_t a = t.Create();
  t.Complete(a, Status(Code::kMismatch, "shape differs"));
  t.Complete(a, Status::Ok());  // a second completion is ignored
  Status s = t.Wait(a, std::chrono::seconds(1));
  REQUIRE(s.code() == Code::kMismatch);
  REQUIRE(t.WithResult(a, [](const OpResult&) { return Status::Ok(); }).code() == Code::kMismatch);
  REQUIRE(t.Release(a).ok());
  int64_t b = t.Create();
  REQUIRE(b != a);
}

TEST_CASE("tensor queue rejects a name in flight and frees it on Take") {
  TensorQueue q;
  Request r;
  r.spec.name = "grad/w";
  r.handle = 1;
  REQUIRE(q.Push(r).ok());
  Status dup = q.Push(r);
  REQUIRE(dup.code() == Code::kAlreadyExists);
  REQUIRE(dup.message().find("grad/w") != std::string::npos);
  auto fresh = q.PopFresh();
  REQUIRE(fresh.size() == 1);
  REQUIRE(q.PopFresh().empty());
  auto taken = q.Take("grad/w");
  REQUIRE(taken.has_value());
  REQUIRE(taken->handle == 1);
  REQUIRE_FALSE(q.Take("grad/w").has_value());
  REQUIRE(q.Push(r).ok());
  REQUIRE(q.TakeAll().size() == 1);
  REQUIRE(q.size() == 0);
}
