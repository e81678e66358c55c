#include "collectives/loopback/loopback_communicator.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/mutex.h"
#include "common/reduce.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
using Task = std::function<Status()>;

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

size_t Offset(const std::vector<size_t>& v, int upto) {
  return std::accumulate(v.begin(), v.begin() + upto, size_t{0});
}

// The queue and the progress thread. Shared with the Works that Fence() hands out.
struct Stream {
  Mutex mu;
  CondVar cv;
  std::deque<Task> queue GUARDED_BY(mu);
  uint64_t queued GUARDED_BY(mu) = 0;  // tasks ever queued
  uint64_t done GUARDED_BY(mu) = 0;    // tasks ever finished (run or dropped)
  Status error GUARDED_BY(mu);         // sticky
  bool stop GUARDED_BY(mu) = false;

  Status Error() {
    MutexLock lock(&mu);
    return error;
  }
  void Fail(const Status& s) {
    MutexLock lock(&mu);
    if (error.ok()) error = s;
    cv.NotifyAll();
  }
};

class FenceWork : public Work {
 public:
  FenceWork(std::shared_ptr<Stream> stream, uint64_t target)
      : stream_(std::move(stream)), target_(target) {}
  bool Test(Status* status) override {
    MutexLock lock(&stream_->mu);
    if (stream_->done < target_ && stream_->error.ok()) return false;
    *status = stream_->error;
    return true;
  }

 private:
  std::shared_ptr<Stream> stream_;
  const uint64_t target_;
};

class LoopbackCommunicator : public Communicator {
 public:
  explicit LoopbackCommunicator(const LoopbackConfig& c)
      : config_(c), stream_(std::make_shared<Stream>()) {
    thread_ = std::thread([this] { Progress(); });
  }

  ~LoopbackCommunicator() override {
    {
      MutexLock lock(&stream_->mu);
      stream_->stop = true;
      if (stream_->error.ok()) stream_->error = Aborted("the loopback communicator was destroyed");
    }
    stream_->cv.NotifyAll();
    thread_.join();
  }

  int rank() const override { return config_.rank; }
  int size() const override { return config_.size; }
  const char* name() const override { return "loopback"; }

  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    const size_t bytes = count * DataTypeSize(dtype);
    HORA_RETURN_IF_ERROR(CheckBytes(bytes, "allreduce"));
    return Collective([this, buf, count, dtype, op, bytes](uint64_t k) -> Status {
      std::string mine(static_cast<const char*>(buf), bytes);
      auto all = Exchange(k, mine);
      if (!all.ok()) return all.status();
      std::vector<std::string>& v = all.value();
      v[config_.rank] = std::move(mine);
      for (int r = 0; r < config_.size; ++r) {
        if (v[r].size() != bytes) return SizeMismatch("allreduce", r, v[r].size(), bytes);
      }
      if (bytes == 0) return Status::Ok();
      std::memcpy(buf, v[0].data(), bytes);
      for (int r = 1; r < config_.size; ++r) ReduceInto(buf, v[r].data(), count, dtype, op);
      return Status::Ok();
    });
  }

  Status Broadcast(void* buf, size_t bytes, int root) override {
    HORA_RETURN_IF_ERROR(CheckPeerIndex(root, "broadcast root", true));
    HORA_RETURN_IF_ERROR(CheckBytes(bytes, "broadcast"));
    return Collective([this, buf, bytes, root](uint64_t k) -> Status {
      const bool is_root = root == config_.rank;
      auto all = Exchange(k, is_root ? std::string(static_cast<const char*>(buf), bytes) : "");
      if (!all.ok()) return all.status();
      if (is_root) return Status::Ok();
      const std::string& got = all.value()[root];
      if (got.size() != bytes) return SizeMismatch("broadcast", root, got.size(), bytes);
      if (bytes > 0) std::memcpy(buf, got.data(), bytes);
      return Status::Ok();
    });
  }

  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override {
    if (bytes_per_rank.size() != static_cast<size_t>(config_.size)) {
      return InvalidArgument("loopback allgatherv needs one byte count per rank");
    }
    HORA_RETURN_IF_ERROR(CheckBytes(bytes_per_rank[config_.rank], "allgatherv"));
    return Collective([this, in, out, bytes_per_rank](uint64_t k) -> Status {
      const size_t mine = bytes_per_rank[config_.rank];
      std::string own(static_cast<const char*>(in), mine);
      auto all = Exchange(k, own);
      if (!all.ok()) return all.status();
      all.value()[config_.rank] = std::move(own);
      char* dst = static_cast<char*>(out);
      for (int r = 0; r < config_.size; ++r) {
        const std::string& got = all.value()[r];
        if (got.size() != bytes_per_rank[r]) {
          return SizeMismatch("allgatherv", r, got.size(), bytes_per_rank[r]);
        }
        if (!got.empty()) std::memcpy(dst, got.data(), got.size());
        dst += got.size();
      }
      return Status::Ok();
    });
  }

  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override {
    const size_t n = static_cast<size_t>(config_.size);
    if (send_bytes.size() != n || recv_bytes.size() != n) {
      return InvalidArgument("loopback alltoallv needs one send and one receive count per rank");
    }
    HORA_RETURN_IF_ERROR(CheckBytes(Sum(send_bytes) + n * sizeof(uint64_t), "alltoallv"));
    return Collective([this, in, send_bytes, out, recv_bytes](uint64_t k) -> Status {
      // Payload: the sender's byte count per receiver, then its whole input.
      std::string payload(send_bytes.size() * sizeof(uint64_t), '\0');
      for (size_t r = 0; r < send_bytes.size(); ++r) {
        const uint64_t b = send_bytes[r];
        std::memcpy(&payload[r * sizeof(uint64_t)], &b, sizeof(b));
      }
      payload.append(static_cast<const char*>(in), Sum(send_bytes));
      auto all = Exchange(k, payload);
      if (!all.ok()) return all.status();
      all.value()[config_.rank] = std::move(payload);
      char* dst = static_cast<char*>(out);
      const size_t header = send_bytes.size() * sizeof(uint64_t);
      for (int s = 0; s < config_.size; ++s) {
        const std::string& p = all.value()[s];
        if (p.size() < header) return SizeMismatch("alltoallv header", s, p.size(), header);
        size_t off = header;
        uint64_t len = 0;
        for (int r = 0; r <= config_.rank; ++r) {
          std::memcpy(&len, &p[r * sizeof(uint64_t)], sizeof(len));
          if (r < config_.rank) off += len;
        }
        if (len != recv_bytes[s] || off + len > p.size()) {
          return SizeMismatch("alltoallv", s, len, recv_bytes[s]);
        }
        if (len > 0) std::memcpy(dst, p.data() + off, len);
        dst += len;
      }
      return Status::Ok();
    });
  }

  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    if (counts.size() != static_cast<size_t>(config_.size)) {
      return InvalidArgument("loopback reducescatter needs one count per rank");
    }
    const size_t esize = DataTypeSize(dtype);
    HORA_RETURN_IF_ERROR(CheckBytes(Sum(counts) * esize, "reducescatter"));
    return Collective([this, in, out, counts, dtype, op, esize](uint64_t k) -> Status {
      const size_t total = Sum(counts) * esize;
      std::string own(static_cast<const char*>(in), total);
      auto all = Exchange(k, own);
      if (!all.ok()) return all.status();
      all.value()[config_.rank] = std::move(own);
      const size_t off = Offset(counts, config_.rank) * esize;
      const size_t mine = counts[config_.rank];
      for (int r = 0; r < config_.size; ++r) {
        const std::string& p = all.value()[r];
        if (p.size() != total) return SizeMismatch("reducescatter", r, p.size(), total);
        if (mine == 0) continue;
        if (r == 0) {
          std::memcpy(out, p.data() + off, mine * esize);
        } else {
          ReduceInto(out, p.data() + off, mine, dtype, op);
        }
      }
      return Status::Ok();
    });
  }

  Status Barrier() override {
    return Collective([this](uint64_t k) { return Exchange(k, "").status(); });
  }

  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override {
    HORA_RETURN_IF_ERROR(CheckPeerIndex(peer, "send peer", false));
    HORA_RETURN_IF_ERROR(CheckBytes(bytes, "send"));
    const std::string key = P2pKey(config_.rank, peer, tag, sends_[{peer, tag}]++);
    return Enqueue([this, key, buf, bytes]() -> Status {
      return config_.store->Set(key, std::string(static_cast<const char*>(buf), bytes));
    });
  }

  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override {
    HORA_RETURN_IF_ERROR(CheckPeerIndex(peer, "recv peer", false));
    const std::string key = P2pKey(peer, config_.rank, tag, recvs_[{peer, tag}]++);
    return Enqueue([this, key, buf, bytes, peer]() -> Status {
      auto got = Fetch(key);
      if (!got.ok()) return got.status();
      HORA_RETURN_IF_ERROR(config_.store->Delete(key));
      if (got.value().size() != bytes) return SizeMismatch("recv", peer, got.value().size(), bytes);
      if (bytes > 0) std::memcpy(buf, got.value().data(), bytes);
      return Status::Ok();
    });
  }

  std::unique_ptr<Work> Fence() override {
    MutexLock lock(&stream_->mu);
    return std::make_unique<FenceWork>(stream_, stream_->queued);
  }

  void Abort(const Status& reason) override {
    stream_->Fail(reason.ok() ? Aborted("the communicator was aborted") : reason);
  }

 private:
  Status Enqueue(Task task) {
    {
      MutexLock lock(&stream_->mu);
      if (!stream_->error.ok()) return stream_->error;
      stream_->queue.push_back(std::move(task));
      ++stream_->queued;
    }
    stream_->cv.NotifyAll();
    return Status::Ok();
  }

  // Queues a collective; it runs as collective number k of this communicator.
  Status Collective(std::function<Status(uint64_t)> body) {
    const uint64_t k = next_collective_++;
    return Enqueue([body = std::move(body), k] { return body(k); });
  }

  void Progress() {
    MutexLock lock(&stream_->mu);
    for (;;) {
      stream_->cv.Wait(&stream_->mu, [&] {
        stream_->mu.AssertHeld();
        return stream_->stop || !stream_->queue.empty();
      });
      if (stream_->queue.empty()) return;  // stopped
      Task task = std::move(stream_->queue.front());
      stream_->queue.pop_front();
      const bool run = stream_->error.ok();
      lock.Unlock();
      Status s = run ? task() : Status::Ok();
      lock.Lock();
      if (!s.ok() && stream_->error.ok()) {
        stream_->error = s;
        HORA_LOG_ERROR("loopback communicator rank {} is broken: {}", config_.rank, s.ToString());
      }
      ++stream_->done;
      stream_->cv.NotifyAll();
    }
  }

  // Publishes this member's contribution to collective k and reads everyone else's (the
  // entry for this rank is left empty). Then deletes this member's key of k-1 (see header).
  StatusOr<std::vector<std::string>> Exchange(uint64_t k, const std::string& mine) {
    HORA_RETURN_IF_ERROR(config_.store->Set(CollectiveKey(k, config_.rank), mine));
    std::vector<std::string> all(config_.size);
    for (int r = 0; r < config_.size; ++r) {
      if (r == config_.rank) continue;
      auto got = Fetch(CollectiveKey(k, r));
      if (!got.ok()) return got.status();
      all[r] = std::move(got).value();
    }
    if (k > 0) HORA_RETURN_IF_ERROR(config_.store->Delete(CollectiveKey(k - 1, config_.rank)));
    return all;
  }

  // Waits for a key in slices, so that Abort() ends the wait within one slice.
  StatusOr<std::string> Fetch(const std::string& key) {
    const auto deadline = std::chrono::steady_clock::now() + config_.timeout;
    for (;;) {
      HORA_RETURN_IF_ERROR(stream_->Error());
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return DeadlineExceeded("loopback: waited " + std::to_string(config_.timeout.count()) +
                                " ms for '" + key + "' (a peer may have died or stopped)");
      }
      auto got = config_.store->Get(key, std::min(left, milliseconds(200)));
      if (got.ok() || got.status().code() != Code::kDeadlineExceeded) return got;
    }
  }

  std::string CollectiveKey(uint64_t k, int r) const {
    return config_.key_prefix + "c/" + std::to_string(k) + "/" + std::to_string(r);
  }
  std::string P2pKey(int from, int to, uint32_t tag, uint64_t n) const {
    return config_.key_prefix + "p/" + std::to_string(from) + "/" + std::to_string(to) + "/" +
           std::to_string(tag) + "/" + std::to_string(n);
  }

  Status CheckBytes(size_t bytes, const char* what) const {
    if (static_cast<int64_t>(bytes) + 4096 > config_.max_message_bytes) {
      return InvalidArgument(std::string("loopback ") + what + " of " + std::to_string(bytes) +
                             " bytes: the loopback backend carries at most " +
                             std::to_string(config_.max_message_bytes - 4096) +
                             " bytes per contribution (HORA_MAX_MESSAGE_BYTES)");
    }
    return stream_->Error();
  }
  Status CheckPeerIndex(int r, const char* what, bool self_ok) const {
    if (r < 0 || r >= config_.size || (!self_ok && r == config_.rank)) {
      return InvalidArgument(std::string("loopback ") + what + " " + std::to_string(r) +
                             " is out of range [0, " + std::to_string(config_.size) + ")" +
                             (self_ok ? "" : " or this rank"));
    }
    return Status::Ok();
  }
  Status SizeMismatch(const char* what, int peer, size_t got, size_t want) const {
    return Internal(std::string("loopback ") + what + ": rank " + std::to_string(peer) + " gave " +
                    std::to_string(got) + " bytes, expected " + std::to_string(want));
  }

  const LoopbackConfig config_;
  const std::shared_ptr<Stream> stream_;
  // Used by the driving thread only (enqueue side).
  uint64_t next_collective_ = 0;
  std::map<std::pair<int, uint32_t>, uint64_t> sends_, recvs_;
  std::thread thread_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateLoopbackCommunicator(const LoopbackConfig& c) {
  if (c.size < 1 || c.rank < 0 || c.rank >= c.size) {
    return InvalidArgument("loopback: rank " + std::to_string(c.rank) + " of size " +
                           std::to_string(c.size) + " is out of range");
  }
  if (c.store == nullptr) return InvalidArgument("loopback: a KvStore is required");
  if (c.timeout.count() <= 0) return InvalidArgument("loopback: timeout must be > 0 ms");
  return std::unique_ptr<Communicator>(new LoopbackCommunicator(c));
}

}  // namespace hora
