// Moving a client to its host's relay (host_relay.h) after Join.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "common/logging.h"
#include "coordinator/client_impl.h"

namespace hora {

Status ClientImpl::UseHostRelay(std::chrono::system_clock::time_point deadline) {
  std::vector<std::string> hostnames;
  for (const RankInfo& r : topology_.ranks) hostnames.push_back(r.hostname);
  const int relay_rank = HostRelayRankOf(hostnames, config_.rank);
  if (relay_rank < 0) return Status::Ok();
  const std::string key = "hora/relay/" + std::to_string(relay_rank);
  const std::string me = "rank " + std::to_string(config_.rank);
  std::string address;
  if (relay_rank == config_.rank) {
    HostRelayConfig rc;
    rc.token = config_.token;
    rc.relay_rank = relay_rank;
    rc.upstream = channel_;
    rc.max_message_bytes = config_.max_message_bytes;
    auto relay = HostRelay::Start(rc);
    if (!relay.ok()) {
      return Status(relay.status().code(),
                    me + ": starting its host relay: " + relay.status().message());
    }
    relay_ = std::move(relay).value();
    address = relay_->address();
    HORA_RETURN_IF_ERROR(Set(key, address));
  } else {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::system_clock::now());
    auto got = Get(key, std::max(left, std::chrono::milliseconds(1)));
    if (!got.ok()) {
      return Status(got.status().code(), me + ": waiting for the address of its host relay (rank " +
                                             std::to_string(relay_rank) +
                                             "): " + got.status().message());
    }
    address = std::move(got).value();
  }
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                           ClientChannelArgs(config_));
  if (!channel->WaitForConnected(deadline)) {
    return Unavailable(me + ": cannot connect to its host relay (rank " +
                       std::to_string(relay_rank) + ") at " + address);
  }
  HORA_LOG_INFO("{}: the control plane goes through the host relay of rank {} at {}", me,
                relay_rank, address);
  channel_ = std::move(channel);
  stub_ = proto::Coordinator::NewStub(channel_);
  relay_rank_ = relay_rank;
  address_ = address;
  return Status::Ok();
}

}  // namespace hora
