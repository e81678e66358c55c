// The TCP mailbox (collectives/mailbox.h), members as threads: every message reaches every
// other member in its sender's order, a closed member is named, Abort ends a wait, and a
// connection that does not present the token is not taken for a member.
#include "collectives/mailbox.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/local_config.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace {

std::vector<std::unique_ptr<Mailbox>> Open(int size, MemoryStore* store) {
  std::vector<std::unique_ptr<Mailbox>> boxes(size);
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto box = CreateMailbox(LocalConfig(r, size, store, "test/"));
      if (box.ok()) {
        boxes[r] = std::move(box.value());
      } else {
        errors[r] = box.status().ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    INFO(errors[r]);
    REQUIRE(boxes[r] != nullptr);
  }
  return boxes;
}

// Reads until `want` messages came or 10 s passed; appends "member:text" per message.
std::vector<std::string> Collect(Mailbox* box, size_t want, Status* status) {
  std::vector<std::string> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
    *status = box->Read([&](int m, const char* data, size_t bytes) {
      got.push_back(std::to_string(m) + ":" + std::string(data, bytes));
    });
    if (!status->ok()) break;
    box->Await(100000, -1);
  }
  return got;
}

TEST_CASE("every message reaches every other member in its sender's order") {
  constexpr int kSize = 4;
  constexpr int kMessages = 300;
  MemoryStore store;
  auto boxes = Open(kSize, &store);
  std::vector<std::thread> senders;
  std::vector<Status> posted(kSize);  // the first failed Post (Catch2 asserts in this thread)
  for (int r = 0; r < kSize; ++r) {
    senders.emplace_back([&, r] {
      for (int i = 0; i < kMessages; ++i) {
        // Sizes from empty to 70 KiB: frames cross reads.
        std::string text =
            std::to_string(i) + std::string(static_cast<size_t>((i * 7919) % 70000), 'x');
        if (i % 50 == 0) text = std::to_string(i);
        Status s = boxes[r]->Post(text.data(), text.size());
        if (!s.ok() && posted[r].ok()) posted[r] = s;
      }
    });
  }
  std::vector<std::vector<std::string>> got(kSize);
  std::vector<Status> status(kSize);
  std::vector<std::thread> readers;
  for (int r = 0; r < kSize; ++r) {
    readers.emplace_back(
        [&, r] { got[r] = Collect(boxes[r].get(), (kSize - 1) * kMessages, &status[r]); });
  }
  for (auto& t : senders) t.join();
  for (auto& t : readers) t.join();
  for (int r = 0; r < kSize; ++r) {
    INFO("member " << r);
    REQUIRE(posted[r].ok());
    REQUIRE(status[r].ok());
    REQUIRE(got[r].size() == static_cast<size_t>((kSize - 1) * kMessages));
    std::vector<int> next(kSize, 0);
    for (const std::string& g : got[r]) {
      const int m = std::stoi(g.substr(0, g.find(':')));
      REQUIRE(m != r);
      const std::string body = g.substr(g.find(':') + 1);
      const int i = next[m]++;
      REQUIRE(std::stoi(body) == i);
      const size_t tail = i % 50 == 0 ? 0 : static_cast<size_t>((i * 7919) % 70000);
      REQUIRE(body.size() == std::to_string(i).size() + tail);
    }
    for (int m = 0; m < kSize; ++m) CHECK(next[m] == (m == r ? 0 : kMessages));
  }
}

TEST_CASE("a message posted to some members reaches only them; a bad member is refused") {
  MemoryStore store;
  auto boxes = Open(4, &store);
  REQUIRE(boxes[1]->PostTo({3, 0}, "to 3 and 0", 10).ok());
  REQUIRE(boxes[1]->Post("to all", 6).ok());
  for (int r : {0, 3}) {
    Status status;
    const std::vector<std::string> got = Collect(boxes[r].get(), 2, &status);
    REQUIRE(status.ok());
    CHECK(got == std::vector<std::string>{"1:to 3 and 0", "1:to all"});
  }
  Status status;
  CHECK(Collect(boxes[2].get(), 1, &status) == std::vector<std::string>{"1:to all"});
  const Status self = boxes[1]->PostTo({1}, "x", 1);
  CHECK(self.code() == Code::kInvalidArgument);
  CHECK(self.message() ==
        "mailbox: member 1 cannot post to 1 (not one of its peers among members 0..3)");
  CHECK(boxes[1]->PostTo({4}, "x", 1).code() == Code::kInvalidArgument);
}

TEST_CASE("members connected to their peers only: a star of 4 around member 1") {
  MemoryStore store;
  const std::vector<std::vector<int>> peers = {{1}, {0, 2, 3}, {1}, {1}};
  std::vector<std::unique_ptr<Mailbox>> boxes(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      auto box = CreateMailbox(LocalConfig(r, 4, &store, "test/"), peers[static_cast<size_t>(r)]);
      if (box.ok()) boxes[static_cast<size_t>(r)] = std::move(box).value();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& box : boxes) REQUIRE(box != nullptr);
  REQUIRE(boxes[1]->Post("hub", 3).ok());
  REQUIRE(boxes[3]->Post("leaf", 4).ok());
  Status status;
  for (int r : {0, 2, 3}) {
    CHECK(Collect(boxes[static_cast<size_t>(r)].get(), 1, &status) ==
          std::vector<std::string>{"1:hub"});
  }
  CHECK(Collect(boxes[1].get(), 1, &status) == std::vector<std::string>{"3:leaf"});
  CHECK(boxes[0]->PostTo({2}, "x", 1).code() == Code::kInvalidArgument);  // not a peer
  MemoryStore other;
  CHECK(CreateMailbox(LocalConfig(0, 2, &other, "test/"), {0}).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("a member whose mailbox closed is named by the others") {
  MemoryStore store;
  auto boxes = Open(3, &store);
  REQUIRE(boxes[2]->Post("last", 4).ok());
  boxes[2].reset();
  std::vector<std::string> got;
  Status status;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (status.ok() && std::chrono::steady_clock::now() < deadline) {
    status = boxes[0]->Read([&](int m, const char* d, size_t n) {
      got.push_back(std::to_string(m) + std::string(d, n));
    });
    boxes[0]->Await(100000, -1);
  }
  REQUIRE(got == std::vector<std::string>{"2last"});  // what it sent before closing still arrives
  REQUIRE(status.code() == Code::kPeerFailure);
  REQUIRE(status.message().find("member 2") != std::string::npos);
}

TEST_CASE("Abort ends a wait and every later post") {
  MemoryStore store;
  auto boxes = Open(2, &store);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    boxes[0]->Abort(PeerFailure("rank 1 died"));
  });
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(boxes[0]->Await(20000000, -1));
  aborter.join();
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  const Status s = boxes[0]->Post("x", 1);
  REQUIRE(s.code() == Code::kPeerFailure);
  REQUIRE(s.message() == "rank 1 died");
}

TEST_CASE("a connection without the token is not taken for a member") {
  MemoryStore store;
  std::unique_ptr<Mailbox> zero;
  std::thread opener([&] {
    auto box = CreateMailbox(LocalConfig(0, 2, &store, "test/"));
    if (box.ok()) zero = std::move(box.value());
  });
  // Member 0's address, then a stranger connects with a wrong token before member 1 does.
  auto value = store.Get("test/mailbox/0", std::chrono::milliseconds(10000));
  REQUIRE(value.ok());
  std::istringstream in(value.value());
  std::string host;
  int port = 0;
  in >> host >> port;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  const char bogus[16] = {1, 0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7, 7};
  REQUIRE(write(fd, bogus, sizeof(bogus)) == static_cast<ssize_t>(sizeof(bogus)));
  auto one = CreateMailbox(LocalConfig(1, 2, &store, "test/"));
  opener.join();
  close(fd);
  REQUIRE(one.ok());
  REQUIRE(zero != nullptr);
  REQUIRE(one.value()->Post("hi", 2).ok());
  Status status;
  const auto got = Collect(zero.get(), 1, &status);
  REQUIRE(got == std::vector<std::string>{"1:hi"});
}

TEST_CASE("a member that never comes ends the others' creation within the timeout") {
  MemoryStore store;
  BackendConfig c = LocalConfig(0, 2, &store, "test/");
  c.timeout = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  auto box = CreateMailbox(c);
  REQUIRE_FALSE(box.ok());
  REQUIRE(box.status().code() == Code::kDeadlineExceeded);
  REQUIRE(box.status().message().find("member(s) above it") != std::string::npos);
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

}  // namespace
}  // namespace hora
