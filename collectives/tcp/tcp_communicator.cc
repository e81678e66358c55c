// TcpCommunicator: argument checks, the algorithm choice, and Send / Recv.
#include "collectives/tcp/tcp_communicator.h"

#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "collectives/tcp/tcp_collectives.h"
#include "collectives/tcp/transfer.h"
#include "collectives/tcp_mesh.h"

namespace hora {
namespace {

struct P2pHeader {
  uint32_t tag;
  uint32_t reserved;
  uint64_t bytes;
};

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

class TcpCommunicator : public Communicator {
 public:
  TcpCommunicator(std::unique_ptr<Links> links, const TcpOptions& options)
      : links_(std::move(links)), options_(options) {}

  int rank() const override { return links_->rank(); }
  int size() const override { return links_->size(); }
  const char* name() const override { return kTcpBackend; }

  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    return Reduce(buf, count, dtype, op, nullptr);
  }

  bool folds_postscale() const override { return true; }
  Status AllreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                         const Postscale& post) override {
    return Reduce(buf, count, dtype, op, post.identity() ? nullptr : &post);
  }

  Status Broadcast(void* buf, size_t bytes, int root) override {
    if (root < 0 || root >= size()) {
      return InvalidArgument("tcp broadcast: root " + std::to_string(root) +
                             " is out of range [0, " + std::to_string(size()) + ")");
    }
    HORA_RETURN_IF_ERROR(links_->error());
    if (bytes == 0 || size() == 1) return Status::Ok();
    return ChainBroadcast(*links_, options_, static_cast<char*>(buf), bytes, root);
  }

  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override {
    if (bytes_per_rank.size() != static_cast<size_t>(size())) {
      return InvalidArgument("tcp allgatherv needs one byte count per rank: got " +
                             std::to_string(bytes_per_rank.size()) + ", size is " +
                             std::to_string(size()));
    }
    HORA_RETURN_IF_ERROR(links_->error());
    if (Sum(bytes_per_rank) == 0) return Status::Ok();
    if (size() == 1) {
      if (bytes_per_rank[0] > 0 && in != out) std::memmove(out, in, bytes_per_rank[0]);
      return Status::Ok();
    }
    return RingAllgatherv(*links_, options_, static_cast<const char*>(in), static_cast<char*>(out),
                          bytes_per_rank);
  }

  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override {
    if (send_bytes.size() != static_cast<size_t>(size()) ||
        recv_bytes.size() != static_cast<size_t>(size())) {
      return InvalidArgument("tcp alltoallv needs one send and one receive byte count per rank");
    }
    if (send_bytes[rank()] != recv_bytes[rank()]) {
      return InvalidArgument("tcp alltoallv: this rank sends itself " +
                             std::to_string(send_bytes[rank()]) + " bytes but expects " +
                             std::to_string(recv_bytes[rank()]));
    }
    HORA_RETURN_IF_ERROR(links_->error());
    if (Sum(send_bytes) + Sum(recv_bytes) == 0) return Status::Ok();
    return PairwiseAlltoallv(*links_, options_, static_cast<const char*>(in), send_bytes,
                             static_cast<char*>(out), recv_bytes);
  }

  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    HORA_RETURN_IF_ERROR(CheckReduce("reducescatter", dtype, op));
    if (counts.size() != static_cast<size_t>(size())) {
      return InvalidArgument("tcp reducescatter needs one element count per rank");
    }
    HORA_RETURN_IF_ERROR(links_->error());
    const size_t total = Sum(counts);
    if (total == 0) return Status::Ok();
    if (size() == 1) {
      if (counts[0] > 0 && in != out) std::memmove(out, in, counts[0] * DataTypeSize(dtype));
      return Status::Ok();
    }
    return RingReducescatter(*links_, options_, static_cast<const char*>(in),
                             static_cast<char*>(out), counts, dtype, op, &scratch_);
  }

  Status Barrier() override {
    uint8_t token = 1;
    return Allreduce(&token, 1, DataType::kUint8, ReduceOp::kMax);
  }

  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override {
    HORA_RETURN_IF_ERROR(CheckPeer(peer, "send"));
    P2pHeader header{tag, 0, bytes};
    std::vector<SendStream> sends(1);
    sends[0].peer = peer;
    sends[0].lane0 = links_->channels();
    sends[0].pieces.push_back({reinterpret_cast<char*>(&header), sizeof(header)});
    if (bytes > 0) {
      CutPieces(static_cast<char*>(const_cast<void*>(buf)), bytes, options_.piece_bytes,
                &sends[0].pieces);
    }
    std::vector<RecvStream> none;
    return links_->Run(&sends, &none, "send to member " + std::to_string(peer));
  }

  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override {
    HORA_RETURN_IF_ERROR(CheckPeer(peer, "recv"));
    const std::string what = "recv from member " + std::to_string(peer);
    for (;;) {
      auto held = held_.find({peer, tag});
      if (held != held_.end() && !held->second.empty()) {
        std::vector<char> message = std::move(held->second.front());
        held->second.pop_front();
        HORA_RETURN_IF_ERROR(CheckSize(message.size(), bytes, peer, tag));
        if (bytes > 0) std::memcpy(buf, message.data(), bytes);
        return Status::Ok();
      }
      P2pHeader header{};
      HORA_RETURN_IF_ERROR(ReadP2p(peer, reinterpret_cast<char*>(&header), sizeof(header), what));
      if (header.tag == tag) {
        if (header.bytes != bytes) {
          std::vector<char> drop(header.bytes);
          HORA_RETURN_IF_ERROR(ReadP2p(peer, drop.data(), drop.size(), what));
          return CheckSize(header.bytes, bytes, peer, tag);
        }
        return ReadP2p(peer, static_cast<char*>(buf), bytes, what);
      }
      std::vector<char> message(header.bytes);  // another tag's: hold it for its Recv
      HORA_RETURN_IF_ERROR(ReadP2p(peer, message.data(), message.size(), what));
      held_[{peer, header.tag}].push_back(std::move(message));
    }
  }

  void Abort(const Status& reason) override { links_->Abort(reason); }

 private:
  Status Reduce(void* buf, size_t count, DataType dtype, ReduceOp op, const Postscale* post) {
    HORA_RETURN_IF_ERROR(CheckReduce("allreduce", dtype, op));
    HORA_RETURN_IF_ERROR(links_->error());
    if (count == 0) return Status::Ok();
    char* data = static_cast<char*>(buf);
    if (size() == 1) {
      if (post != nullptr) ScaleInPlace(buf, count, dtype, *post);
      return Status::Ok();
    }
    const size_t bytes = count * DataTypeSize(dtype);
    if (bytes <= options_.small_allreduce_bytes ||
        (size() == 2 && bytes <= options_.pair_doubling_bytes) ||
        count < static_cast<size_t>(size())) {
      return DoublingAllreduce(*links_, options_, data, count, dtype, op, post, &scratch_);
    }
    return RingAllreduce(*links_, options_, data, count, dtype, op, post, &scratch_);
  }

  Status CheckReduce(const char* what, DataType dtype, ReduceOp op) const {
    if (!IsValidDataType(static_cast<int32_t>(dtype))) {
      return InvalidArgument(std::string("tcp ") + what + ": invalid dtype " +
                             std::to_string(static_cast<int32_t>(dtype)));
    }
    if (op != ReduceOp::kSum && op != ReduceOp::kMin && op != ReduceOp::kMax &&
        op != ReduceOp::kProduct) {
      return InvalidArgument(std::string("tcp ") + what + " does not support op " +
                             ReduceOpName(op) + " (average is a sum with a postscale)");
    }
    return Status::Ok();
  }

  Status CheckPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return InvalidArgument(std::string("tcp ") + what + ": peer " + std::to_string(peer) +
                             " is out of range [0, " + std::to_string(size()) + ") or this rank");
    }
    return links_->error();
  }

  static Status CheckSize(size_t got, size_t want, int peer, uint32_t tag) {
    if (got == want) return Status::Ok();
    return InvalidArgument("tcp recv: member " + std::to_string(peer) + " sent " +
                           std::to_string(got) + " bytes with tag " + std::to_string(tag) +
                           ", this member expected " + std::to_string(want));
  }

  Status ReadP2p(int peer, char* data, size_t bytes, const std::string& what) {
    if (bytes == 0) return Status::Ok();
    std::vector<RecvStream> recvs(1);
    recvs[0].peer = peer;
    recvs[0].lane0 = links_->channels();
    CutPieces(data, bytes, options_.piece_bytes, &recvs[0].pieces);
    std::vector<SendStream> none;
    return links_->Run(&none, &recvs, what);
  }

  // Constant after construction (Links is thread-safe for Abort and error()).
  const std::unique_ptr<Links> links_;
  const TcpOptions options_;
  // The driving thread's.
  std::vector<char> scratch_;
  std::map<std::pair<int, uint32_t>, std::deque<std::vector<char>>> held_;
};

// Every member must cut transfers the same way (pieces, channels, the algorithm's
// threshold), or bytes would land in the wrong place: member 0 publishes its options, the
// others compare theirs.
Status AgreeOnOptions(const BackendConfig& config, const TcpOptions& o) {
  const std::string mine = std::to_string(o.channels) + " " + std::to_string(o.piece_bytes) + " " +
                           std::to_string(o.small_allreduce_bytes) + " " +
                           std::to_string(o.pair_doubling_bytes);
  const std::string key = config.key_prefix + "tcp/options";
  if (config.rank == 0) return config.store->Set(key, mine);
  auto theirs = config.store->Get(key, config.timeout);
  if (!theirs.ok()) return theirs.status();
  if (theirs.value() == mine) return Status::Ok();
  return InvalidArgument("tcp: member " + std::to_string(config.rank) +
                         " has channels, piece bytes, small allreduce bytes and pair doubling "
                         "bytes '" +
                         mine + "' but member 0 has '" + theirs.value() + "' (" + kEnvTcpChannels +
                         ", " + kEnvTcpPieceBytes + ", " + kEnvTcpSmallAllreduceBytes + " and " +
                         kEnvTcpPairDoublingBytes + " must agree on every rank)");
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateTcpCommunicator(const BackendConfig& config,
                                                              const TcpOptions& options) {
  HORA_RETURN_IF_ERROR(ValidateTcpOptions(options));
  if (config.timeout.count() <= 0) return InvalidArgument("tcp: timeout must be > 0 ms");
  if (config.store == nullptr && config.size() > 1) return InvalidArgument("tcp: no store");
  std::vector<Member> members(static_cast<size_t>(config.size()));
  for (int m = 0; m < config.size(); ++m) {
    members[m].global_rank = config.global_ranks[m];
    members[m].host = m < static_cast<int>(config.hostnames.size()) ? config.hostnames[m] : "?";
  }
  std::vector<std::vector<int>> fds(members.size());
  if (config.size() > 1) {
    HORA_RETURN_IF_ERROR(AgreeOnOptions(config, options));
    MeshSpec spec;
    spec.key_prefix = config.key_prefix + "tcp/";
    spec.linked.assign(members.size(), true);
    spec.linked[static_cast<size_t>(config.rank)] = false;
    spec.channels = options.channels + 1;  // the last one carries Send / Recv
    spec.buffer_bytes = options.socket_buffer_bytes;
    spec.what = "tcp backend";
    auto mesh = ConnectMesh(config, spec);
    if (!mesh.ok()) return mesh.status();
    fds = std::move(mesh).value();
  }
  auto links =
      std::make_unique<Links>(config.rank, std::move(members), std::move(fds), options.channels,
                              config.timeout, std::chrono::microseconds(options.spin_us));
  return std::unique_ptr<Communicator>(new TcpCommunicator(std::move(links), options));
}

}  // namespace hora
