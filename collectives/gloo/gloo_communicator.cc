#include "collectives/gloo/gloo_communicator.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "collectives/gloo/kv_store_adapter.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/reduce.h"

namespace hora {
namespace {

// Gloo's reduction callback: out = op(a, b) over n elements (n counts elements, not bytes,
// in this Gloo version: the ring passes segmentBytes / elementSize, and segments are cut at
// multiples of elementSize). In the ring, out == a always; we handle the general case too.
gloo::AllreduceOptions::Func MakeReduceFunction(DataType dtype, ReduceOp op) {
  const size_t elem = DataTypeSize(dtype);
  return [dtype, op, elem](void* out, const void* a, const void* b, size_t n) {
    if (out == b) {
      ReduceInto(out, a, n, dtype, op);  // every op we support is commutative
      return;
    }
    if (out != a) std::memmove(out, a, n * elem);
    ReduceInto(out, b, n, dtype, op);
  };
}

// Gloo's typed setters take the element type only for its size; pick an unsigned integer
// of the dtype's width so elementSize (and so segment alignment) is right for every dtype.
template <typename T>
void RingAllreduce(const std::shared_ptr<gloo::Context>& ctx, void* buf, size_t count,
                   gloo::AllreduceOptions::Func fn, std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(static_cast<T*>(buf), count);
  opts.setReduceFunction(std::move(fn));
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

bool LooksLikeTimeout(const std::string& what) {
  for (const char* needle : {"Timed out", "timed out", "Timeout", "timeout"}) {
    if (what.find(needle) != std::string::npos) return true;
  }
  return false;
}

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> context,
                   std::chrono::milliseconds timeout)
      : context_(std::move(context)), timeout_(timeout) {}

  ~GlooCommunicator() override = default;

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  const char* name() const override { return "gloo"; }

  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  Status Broadcast(void* buf, size_t bytes, int root) override;
  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override;
  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override;
  Status Barrier() override;
  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override;
  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override;
  void Abort(const Status& reason) override;

 private:
  // Runs fn (which calls into Gloo) and turns any exception into a Status. The first
  // failure is sticky: it is recorded, the connections are closed so that peers blocked on
  // this rank fail fast instead of waiting out their timeout, and it is returned by every
  // later call.
  template <typename Fn>
  Status Run(const char* what, size_t bytes, Fn&& fn);
  Status Fail(Status s);
  Status Error() const;
  // Registers an UnboundBuffer for Abort() while this object lives (nullptr: nothing).
  class Waiting {
   public:
    Waiting(GlooCommunicator* c, gloo::transport::UnboundBuffer* b);
    ~Waiting();

   private:
    GlooCommunicator* comm_;
    gloo::transport::UnboundBuffer* buf_;
  };
  // waitSend/waitRecv return false when aborted: then throw like Gloo, with the reason.
  void ThrowIfAborted(bool completed);
  Status CheckPeer(int peer, const char* what) const;

  // Pairwise exchange on the raw transport: posts every non-empty send and receive, then
  // waits for all of them. Zero-byte pairs exchange nothing (both sides know the size), so
  // a rank whose row and column are all zero returns without traffic. Throws like Gloo.
  void ExchangeAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                         const std::vector<size_t>& recv_bytes);

  // Constant after construction.
  const std::shared_ptr<gloo::rendezvous::Context> context_;
  const std::chrono::milliseconds timeout_;
  // The first failure (or the Abort reason); OK while the communicator is healthy.
  mutable Mutex mu_;
  Status error_ GUARDED_BY(mu_);
  std::vector<gloo::transport::UnboundBuffer*> waiting_ GUARDED_BY(mu_);
};

Status GlooCommunicator::Error() const {
  MutexLock lock(&mu_);
  return error_;
}

template <typename Fn>
Status GlooCommunicator::Run(const char* what, size_t bytes, Fn&& fn) {
  if (Status e = Error(); !e.ok()) return e;
  const std::string op = std::string("gloo ") + what + " of " + std::to_string(bytes) + " bytes";
  try {
    fn();
    return Status::Ok();
  } catch (const gloo::IoException& e) {
    if (LooksLikeTimeout(e.what())) {
      return Fail(DeadlineExceeded(
          op + " timed out after " + std::to_string(timeout_.count()) +
          " ms waiting for a peer (a rank may have died or stopped): " + e.what()));
    }
    return Fail(
        PeerFailure(op + " failed: a peer connection broke (a rank may have died): " + e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    return Fail(Internal(op + " failed a gloo check: " + e.what()));
  } catch (const std::exception& e) {
    return Fail(Internal(op + " failed: " + e.what()));
  } catch (...) {
    return Fail(Internal(op + " failed with an unknown exception"));
  }
}

Status GlooCommunicator::Fail(Status s) {
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;  // aborted meanwhile: the abort's reason is the cause
    error_ = s;
  }
  HORA_LOG_ERROR("gloo communicator rank {} is broken: {}", context_->rank, s.ToString());
  try {
    context_->closeConnections();
  } catch (const std::exception& e) {
    HORA_LOG_WARN("gloo: closing connections after a failure: {}", e.what());
  }
  return s;
}

Status GlooCommunicator::Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (!IsValidDataType(static_cast<int32_t>(dtype))) return InvalidArgument("invalid dtype");
  if (op != ReduceOp::kSum && op != ReduceOp::kMin && op != ReduceOp::kMax &&
      op != ReduceOp::kProduct) {
    return InvalidArgument(std::string("gloo allreduce does not support op ") + ReduceOpName(op) +
                           " (average is a sum with a postscale)");
  }
  if (Status e = Error(); !e.ok()) return e;
  // Every rank has the same count, so all skip together.
  if (count == 0 || size() == 1) return Status::Ok();
  const size_t elem = DataTypeSize(dtype);
  return Run("allreduce", count * elem, [&] {
    auto fn = MakeReduceFunction(dtype, op);
    switch (elem) {
      case 1:
        RingAllreduce<uint8_t>(context_, buf, count, fn, timeout_);
        break;
      case 2:
        RingAllreduce<uint16_t>(context_, buf, count, fn, timeout_);
        break;
      case 4:
        RingAllreduce<uint32_t>(context_, buf, count, fn, timeout_);
        break;
      case 8:
        RingAllreduce<uint64_t>(context_, buf, count, fn, timeout_);
        break;
      default:
        HORA_CHECK(false && "unexpected element size");
    }
  });
}

Status GlooCommunicator::Broadcast(void* buf, size_t bytes, int root) {
  if (root < 0 || root >= size()) {
    return InvalidArgument("broadcast root " + std::to_string(root) + " is out of range [0, " +
                           std::to_string(size()) + ")");
  }
  if (Status e = Error(); !e.ok()) return e;
  if (bytes == 0 || size() == 1) return Status::Ok();
  return Run("broadcast", bytes, [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<uint8_t*>(buf), bytes);  // no input: in place on the root
    opts.setRoot(root);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

Status GlooCommunicator::Allgatherv(const void* in, void* out,
                                    const std::vector<size_t>& bytes_per_rank) {
  if (bytes_per_rank.size() != static_cast<size_t>(size())) {
    return InvalidArgument("allgatherv needs one byte count per rank: got " +
                           std::to_string(bytes_per_rank.size()) + ", size is " +
                           std::to_string(size()));
  }
  if (Status e = Error(); !e.ok()) return e;
  const size_t total = Sum(bytes_per_rank);
  if (total == 0) return Status::Ok();  // every rank knows the same counts
  const size_t mine = bytes_per_rank[rank()];
  if (size() == 1) {
    if (mine > 0 && in != out) std::memmove(out, in, mine);
    return Status::Ok();
  }
  size_t before = 0;
  for (int r = 0; r < rank(); ++r) before += bytes_per_rank[r];
  const bool in_place = in == static_cast<const uint8_t*>(out) + before;
  return Run("allgatherv", total, [&] {
    static uint8_t empty = 0;  // a valid address for a zero-byte contribution
    uint8_t* src = mine > 0 ? static_cast<uint8_t*>(const_cast<void*>(in)) : &empty;
    gloo::AllgathervOptions opts(context_);
    // Without an input Gloo gathers in place (this rank's part already in out).
    if (!in_place) opts.setInput(src, mine);  // Gloo only reads the input
    opts.setOutput(static_cast<uint8_t*>(out), bytes_per_rank);
    opts.setTimeout(timeout_);
    gloo::allgatherv(opts);
  });
}

void GlooCommunicator::ExchangeAlltoallv(const void* in, const std::vector<size_t>& send_bytes,
                                         void* out, const std::vector<size_t>& recv_bytes) {
  const int n = size();
  const int me = rank();
  std::vector<size_t> send_off(n, 0), recv_off(n, 0);
  for (int r = 1; r < n; ++r) {
    send_off[r] = send_off[r - 1] + send_bytes[r - 1];
    recv_off[r] = recv_off[r - 1] + recv_bytes[r - 1];
  }
  if (recv_bytes[me] > 0) {
    std::memmove(static_cast<uint8_t*>(out) + recv_off[me],
                 static_cast<const uint8_t*>(in) + send_off[me], recv_bytes[me]);
  }
  const size_t send_total = Sum(send_bytes), recv_total = Sum(recv_bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> sbuf, rbuf;
  if (send_total > 0) sbuf = context_->createUnboundBuffer(const_cast<void*>(in), send_total);
  if (recv_total > 0) rbuf = context_->createUnboundBuffer(out, recv_total);
  const uint64_t slot = gloo::Slot::build(gloo::kAlltoallSlotPrefix, 0);
  int sends = 0, recvs = 0;
  // Staggered order (peer me+i, me-i) spreads the load across peers.
  for (int i = 1; i < n; ++i) {
    const int to = (me + i) % n;
    const int from = (me + n - i) % n;
    if (recv_bytes[from] > 0) {
      rbuf->recv(from, slot, recv_off[from], recv_bytes[from]);
      ++recvs;
    }
    if (send_bytes[to] > 0) {
      sbuf->send(to, slot, send_off[to], send_bytes[to]);
      ++sends;
    }
  }
  Waiting ws(this, sbuf.get()), wr(this, rbuf.get());
  if (!Error().ok()) ThrowIfAborted(false);
  for (int i = 0; i < sends; ++i) ThrowIfAborted(sbuf->waitSend(timeout_));
  for (int i = 0; i < recvs; ++i) ThrowIfAborted(rbuf->waitRecv(timeout_));
}

Status GlooCommunicator::Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                   const std::vector<size_t>& recv_bytes) {
  if (send_bytes.size() != static_cast<size_t>(size()) ||
      recv_bytes.size() != static_cast<size_t>(size())) {
    return InvalidArgument("alltoallv needs one send and one receive byte count per rank");
  }
  if (send_bytes[rank()] != recv_bytes[rank()]) {
    return InvalidArgument("alltoallv: this rank sends itself " +
                           std::to_string(send_bytes[rank()]) + " bytes but expects " +
                           std::to_string(recv_bytes[rank()]));
  }
  if (Status e = Error(); !e.ok()) return e;
  const size_t total = Sum(send_bytes) + Sum(recv_bytes);
  if (total == 0) return Status::Ok();
  if (size() == 1) {
    if (in != out) std::memmove(out, in, send_bytes[0]);
    return Status::Ok();
  }
  return Run("alltoallv", total, [&] { ExchangeAlltoallv(in, send_bytes, out, recv_bytes); });
}

// Reducescatter = alltoallv of the per-rank slices (rank r gets slice r from everyone) and a
// local reduction of the size() received slices, in rank order. See the header comment for
// why this rather than allreduce + copy (which moves twice the data).
Status GlooCommunicator::Reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                       DataType dtype, ReduceOp op) {
  if (!IsValidDataType(static_cast<int32_t>(dtype))) return InvalidArgument("invalid dtype");
  if (op != ReduceOp::kSum && op != ReduceOp::kMin && op != ReduceOp::kMax &&
      op != ReduceOp::kProduct) {
    return InvalidArgument(std::string("gloo reducescatter does not support op ") +
                           ReduceOpName(op));
  }
  if (counts.size() != static_cast<size_t>(size())) {
    return InvalidArgument("reducescatter needs one element count per rank");
  }
  if (Status e = Error(); !e.ok()) return e;
  const size_t elem = DataTypeSize(dtype);
  const size_t mine = counts[rank()] * elem;
  const int n = size();
  if (n == 1) {
    if (mine > 0 && in != out) std::memmove(out, in, mine);
    return Status::Ok();
  }
  std::vector<size_t> send_bytes(n), recv_bytes(n, mine);
  for (int r = 0; r < n; ++r) send_bytes[r] = counts[r] * elem;
  const size_t total = Sum(send_bytes);
  if (total == 0) return Status::Ok();
  // Ranks with an empty slice still send theirs; they just receive nothing.
  std::vector<uint8_t> gathered(mine * n);
  Status s = Run("reducescatter", total,
                 [&] { ExchangeAlltoallv(in, send_bytes, gathered.data(), recv_bytes); });
  if (!s.ok() || mine == 0) return s;
  std::memcpy(out, gathered.data(), mine);
  for (int r = 1; r < n; ++r) {
    ReduceInto(out, gathered.data() + r * mine, counts[rank()], dtype, op);
  }
  return Status::Ok();
}

Status GlooCommunicator::Barrier() {
  if (Status e = Error(); !e.ok()) return e;
  if (size() == 1) return Status::Ok();
  return Run("barrier", 0, [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

Status GlooCommunicator::CheckPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size() || peer == rank()) {
    return InvalidArgument(std::string("gloo ") + what + ": peer " + std::to_string(peer) +
                           " is out of range [0, " + std::to_string(size()) + ") or this rank");
  }
  return Error();
}

// Point-to-point on the raw transport, in a slot space of its own (kP2pSlotPrefix) so that
// it never matches a collective's traffic; Gloo matches sends and receives per (peer, slot)
// in order, which is the contract. A zero-byte message moves nothing: both sides know the
// size from the negotiated plan.
constexpr uint8_t kP2pSlotPrefix = 0x7e;

Status GlooCommunicator::Send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  HORA_RETURN_IF_ERROR(CheckPeer(peer, "send"));
  if (bytes == 0) return Status::Ok();
  return Run("send", bytes, [&] {
    auto ub = context_->createUnboundBuffer(const_cast<void*>(buf), bytes);
    Waiting waiting(this, ub.get());
    if (!Error().ok()) ThrowIfAborted(false);
    ub->send(peer, gloo::Slot::build(kP2pSlotPrefix, tag));
    ThrowIfAborted(ub->waitSend(timeout_));
  });
}

Status GlooCommunicator::Recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  HORA_RETURN_IF_ERROR(CheckPeer(peer, "recv"));
  if (bytes == 0) return Status::Ok();
  return Run("recv", bytes, [&] {
    auto ub = context_->createUnboundBuffer(buf, bytes);
    Waiting waiting(this, ub.get());
    if (!Error().ok()) ThrowIfAborted(false);
    ub->recv(peer, gloo::Slot::build(kP2pSlotPrefix, tag));
    ThrowIfAborted(ub->waitRecv(timeout_));
  });
}

// Debian's libgloo does not install the tcp pair's header, so a pair cannot be signalled
// from here: the operations Gloo runs itself (allreduce, broadcast, allgatherv, barrier) end
// when a peer's connection breaks or at the timeout. The buffers of Hora's own exchanges
// (send, recv, alltoallv, reducescatter) are registered while they wait and are woken now.
void GlooCommunicator::Abort(const Status& reason) {
  MutexLock lock(&mu_);
  if (!error_.ok()) return;
  error_ = reason.ok() ? Aborted("the communicator was aborted") : reason;
  for (gloo::transport::UnboundBuffer* b : waiting_) {
    b->abortWaitSend();
    b->abortWaitRecv();
  }
}

GlooCommunicator::Waiting::Waiting(GlooCommunicator* c, gloo::transport::UnboundBuffer* b)
    : comm_(c), buf_(b) {
  if (buf_ == nullptr) return;
  MutexLock lock(&comm_->mu_);
  comm_->waiting_.push_back(buf_);
}

GlooCommunicator::Waiting::~Waiting() {
  if (buf_ == nullptr) return;
  MutexLock lock(&comm_->mu_);
  auto& w = comm_->waiting_;
  w.erase(std::remove(w.begin(), w.end(), buf_), w.end());
}

void GlooCommunicator::ThrowIfAborted(bool completed) {
  if (completed) return;
  throw gloo::IoException(GLOO_ERROR_MSG("aborted: ", Error().message()));
}

Status ValidateConfig(const GlooConfig& c) {
  if (c.size < 1) return InvalidArgument("gloo: size must be >= 1, got " + std::to_string(c.size));
  if (c.rank < 0 || c.rank >= c.size) {
    return InvalidArgument("gloo: rank " + std::to_string(c.rank) + " is out of range [0, " +
                           std::to_string(c.size) + ")");
  }
  if (c.store == nullptr && c.size > 1) return InvalidArgument("gloo: a KvStore is required");
  if (c.timeout.count() <= 0) return InvalidArgument("gloo: timeout must be > 0 ms");
  if (c.bind_address.empty()) return InvalidArgument("gloo: bind_address is empty");
  return Status::Ok();
}

// Gloo writes to its sockets with writev, which raises SIGPIPE once a peer has closed its end
// (a rank died or left); the signal's default action would kill this process instead of
// letting the write fail with the error Hora reports. Ignored once, unless the program has a
// handler of its own. (CPython ignores SIGPIPE itself; C and C++ programs do not.)
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooConfig& config) {
  HORA_RETURN_IF_ERROR(ValidateConfig(config));
  IgnoreSigpipe();
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = config.bind_address;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return Unavailable("gloo: cannot listen on '" + config.bind_address + "': " + e.what());
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(config.rank, config.size);
  context->setTimeout(config.timeout);
  if (config.size > 1) {
    KvStoreAdapter store(config.store, config.key_prefix, config.timeout);
    const std::string where = "gloo: rank " + std::to_string(config.rank) + " of " +
                              std::to_string(config.size) + " connecting (store prefix '" +
                              config.key_prefix + "'): ";
    try {
      context->connectFullMesh(store, device);
    } catch (const std::exception& e) {
      if (!store.error().ok()) {
        const Status& s = store.error();
        return Status(s.code(), where + "a peer did not publish its address within " +
                                    std::to_string(config.timeout.count()) + " ms: " + s.message());
      }
      if (LooksLikeTimeout(e.what())) return DeadlineExceeded(where + e.what());
      return Unavailable(where + e.what());
    }
  }
  // A world of one connects nothing: every collective completes locally.
  HORA_LOG_INFO("data plane: backend gloo (tcp), rank {}/{}, bind address {}, timeout {} ms",
                config.rank, config.size, config.bind_address, config.timeout.count());
  return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(context), config.timeout));
}

}  // namespace hora
