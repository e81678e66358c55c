#include "runtime/handle_table.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "runtime/tensor_queue.h"

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

TEST_CASE("handles: a waiter that yields first sees completion, timeout and release alike") {
  HandleTable t;
  // Completed while the waiter yields (its 1 s of yielding would outlast the test otherwise).
  int64_t h = t.Create(/*yield_us=*/1000000);
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    t.Complete(h, Status(Code::kMismatch, "the size differs"));
  });
  Status w = t.Wait(h, std::chrono::seconds(10));
  completer.join();
  CHECK(w.code() == Code::kMismatch);
  CHECK(w.message() == "the size differs");
  // The wait's own timeout bounds the yielding.
  int64_t h2 = t.Create(/*yield_us=*/1000000);
  CHECK(t.Wait(h2, std::chrono::milliseconds(20)).code() == Code::kDeadlineExceeded);
  // Released by another thread while a waiter yields.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    (void)t.Release(h2);
  });
  CHECK(t.Wait(h2, std::chrono::seconds(10)).code() == Code::kNotFound);
  releaser.join();
  REQUIRE(t.Release(h).ok());
  CHECK(t.size() == 0);
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
  int fresh = 0;
  q.AnnounceFresh([&](const Request& x) { fresh += x.handle == 1 ? 1 : 100; });
  REQUIRE(fresh == 1);
  q.AnnounceFresh([&](const Request&) { ++fresh; });
  REQUIRE(fresh == 1);
  auto taken = q.Take(TensorKey{kGlobalProcessSet, "grad/w"});
  REQUIRE(taken.has_value());
  REQUIRE(taken->handle == 1);
  REQUIRE_FALSE(q.Take(TensorKey{kGlobalProcessSet, "grad/w"}).has_value());
  REQUIRE(q.Push(r).ok());
  REQUIRE(q.TakeAll().size() == 1);
  REQUIRE(q.size() == 0);
}

TEST_CASE("tensor queue: names are per process set; TakeSet takes one set's requests") {
  TensorQueue q;
  Request a;
  a.spec.name = "w";
  a.handle = 1;
  Request b = a;
  b.spec.process_set = 3;
  b.handle = 2;
  REQUIRE(q.Push(a).ok());
  REQUIRE(q.Push(b).ok());  // the same name in another set is another tensor
  Status dup = q.Push(b);
  REQUIRE(dup.code() == Code::kAlreadyExists);
  REQUIRE(dup.message().find("process set 3") != std::string::npos);
  auto taken = q.TakeSet(3);
  REQUIRE(taken.size() == 1);
  REQUIRE(taken[0].handle == 2);
  REQUIRE(q.size() == 1);
  REQUIRE(q.Take(TensorKey{kGlobalProcessSet, "w"})->handle == 1);
}

TEST_CASE("tensor queue: a request being announced cannot be taken meanwhile") {
  TensorQueue q;
  Request r;
  r.spec.name = "x";
  r.handle = 7;
  REQUIRE(q.Push(r).ok());
  std::atomic<bool> in_fn{false}, taken{false};
  std::thread taker;
  q.AnnounceFresh([&](const Request& x) {
    in_fn = true;
    taker = std::thread([&] { taken = q.Take(TensorKey{kGlobalProcessSet, "x"}).has_value(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // Still ours: Take waits for the queue's lock, which AnnounceFresh holds.
    REQUIRE_FALSE(taken.load());
    REQUIRE(x.handle == 7);
  });
  taker.join();
  REQUIRE(in_fn.load());
  REQUIRE(taken.load());
}

TEST_CASE("tensor queue and handles: reused entries carry only the new request's contents") {
  TensorQueue q;
  HandleTable handles;
  for (int i = 0; i < 200; ++i) {
    Request r;
    r.spec.name = "a gradient name longer than sixteen bytes " + std::to_string(i % 3);
    r.spec.process_set = i % 2;
    r.handle = handles.Create();
    r.input = &q;
    REQUIRE(q.Push(r, i % 4 == 0).ok());
    REQUIRE(q.Push(r).code() == Code::kAlreadyExists);
    int fresh = 0;
    q.AnnounceFresh([&](const Request& x) {
      REQUIRE(x.handle == r.handle);
      ++fresh;
    });
    REQUIRE(fresh == (i % 4 == 0 ? 1 : 0));
    auto taken = q.Take(TensorKeyOf(r.spec));
    REQUIRE(taken.has_value());
    REQUIRE(taken->handle == r.handle);
    REQUIRE(taken->spec.name == r.spec.name);
    REQUIRE(taken->spec.process_set == r.spec.process_set);
    REQUIRE(q.size() == 0);
    OpResult result;
    result.shape = {i};
    handles.Complete(r.handle, i % 5 == 0 ? Status(Code::kInternal, "failed") : Status::Ok(),
                     result);
    bool done = false;
    REQUIRE(handles.Poll(r.handle, &done).ok());
    REQUIRE(done);
    if (i % 5 == 0) {
      REQUIRE(handles.Wait(r.handle, std::chrono::seconds(1)).code() == Code::kInternal);
    } else {
      REQUIRE(handles
                  .WithResult(r.handle,
                              [&](const OpResult& got) {
                                REQUIRE(got.shape == std::vector<int64_t>{i});
                                return Status::Ok();
                              })
                  .ok());
    }
    REQUIRE(handles.Release(r.handle).ok());
    REQUIRE(handles.Release(r.handle).code() == Code::kNotFound);
  }
  // A fresh handle after reuse starts pending, with no result of an earlier one.
  const int64_t h = handles.Create();
  bool done = true;
  REQUIRE(handles.Poll(h, &done).ok());
  REQUIRE_FALSE(done);
  handles.Complete(h, Status::Ok());
  REQUIRE(handles
              .WithResult(h,
                          [](const OpResult& got) {
                            REQUIRE(got.shape.empty());
                            return Status::Ok();
                          })
              .ok());
  REQUIRE(handles.size() == 1);
}
