#include "collectives/tcp/tcp_options.h"

#include <cerrno>
#include <cstdlib>
#include <string>

namespace hora {
namespace {

// *out = the variable's value when it is set; INVALID_ARGUMENT outside [lo, hi].
Status ReadInt(const std::function<const char*(const char*)>& env, const char* name, long long lo,
               long long hi, long long* out) {
  const char* v = env ? env(name) : nullptr;
  if (v == nullptr || *v == '\0') return Status::Ok();
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < lo || parsed > hi) {
    return InvalidArgument(std::string(name) + "=" + v + ": expected an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = parsed;
  return Status::Ok();
}

}  // namespace

StatusOr<TcpOptions> TcpOptionsFromEnv(const std::function<const char*(const char*)>& env) {
  TcpOptions o;
  long long channels = o.channels, piece = static_cast<long long>(o.piece_bytes);
  long long small = static_cast<long long>(o.small_allreduce_bytes);
  long long pair = static_cast<long long>(o.pair_doubling_bytes);
  long long buffer = o.socket_buffer_bytes;
  long long inflight = static_cast<long long>(o.inflight_bytes), spin = o.spin_us;
  HORA_RETURN_IF_ERROR(ReadInt(env, kEnvTcpChannels, 1, 64, &channels));
  HORA_RETURN_IF_ERROR(ReadInt(env, kEnvTcpPieceBytes, 64, 1ll << 30, &piece));
  HORA_RETURN_IF_ERROR(ReadInt(env, kEnvTcpSmallAllreduceBytes, 0, 1ll << 40, &small));
  HORA_RETURN_IF_ERROR(ReadInt(env, kEnvTcpPairDoublingBytes, 0, 1ll << 40, &pair));
  HORA_RETURN_IF_ERROR(ReadInt(env, kEnvTcpSocketBufferBytes, 0, 1ll << 30, &buffer));
  HORA_RETURN_IF_ERROR(ReadInt(env, kEnvTcpInflightBytes, 0, 1ll << 40, &inflight));
  HORA_RETURN_IF_ERROR(ReadInt(env, kEnvTcpSpinUs, 0, 1000000, &spin));
  o.channels = static_cast<int>(channels);
  o.piece_bytes = static_cast<size_t>(piece);
  o.small_allreduce_bytes = static_cast<size_t>(small);
  o.pair_doubling_bytes = static_cast<size_t>(pair);
  o.socket_buffer_bytes = static_cast<int>(buffer);
  o.inflight_bytes = static_cast<size_t>(inflight);
  o.spin_us = static_cast<int>(spin);
  return o;
}

Status ValidateTcpOptions(const TcpOptions& o) {
  if (o.channels < 1 || o.channels > 64) {
    return InvalidArgument("tcp: channels must be in [1, 64], got " + std::to_string(o.channels));
  }
  if (o.piece_bytes < 64) {
    return InvalidArgument("tcp: piece_bytes must be >= 64, got " + std::to_string(o.piece_bytes));
  }
  if (o.pieces_per_block < 1) return InvalidArgument("tcp: pieces_per_block must be >= 1");
  if (o.min_piece_bytes < 64) {
    return InvalidArgument("tcp: min_piece_bytes must be >= 64, got " +
                           std::to_string(o.min_piece_bytes));
  }
  if (o.socket_buffer_bytes < 0) return InvalidArgument("tcp: socket_buffer_bytes must be >= 0");
  if (o.spin_us < 0) return InvalidArgument("tcp: spin_us must be >= 0");
  return Status::Ok();
}

}  // namespace hora
