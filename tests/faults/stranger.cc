// A stranger at a running job's coordinator: wrong and missing tokens, garbage bytes, an
// oversized message. Each must be refused (UNAUTHENTICATED / connection dropped /
// RESOURCE_EXHAUSTED) while the job goes on (tests/faults/test_strangers.py checks that).
//
// Usage: stranger HOST:PORT TOKEN MAX_MESSAGE_BYTES
// Prints one "CHECK <name> ok|FAIL <detail>" line per check, then "N passed, N failed".
#include <arpa/inet.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "proto/coordinator.grpc.pb.h"

namespace {

int g_passed = 0;
int g_failed = 0;

void Check(const std::string& name, bool ok, const std::string& detail) {
  std::printf("CHECK %s %s %s\n", name.c_str(), ok ? "ok" : "FAIL", detail.c_str());
  std::fflush(stdout);
  ok ? ++g_passed : ++g_failed;
}

std::string Describe(const grpc::Status& s) {
  return "code=" + std::to_string(static_cast<int>(s.error_code())) + " msg=" + s.error_message();
}

void Prepare(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("hora-token", token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

// Sends `bytes` on a fresh TCP connection to host:port; true if the server closed it (EOF or
// reset) within `seconds`, reading and discarding whatever it answers first.
bool DroppedAfter(const std::string& host, int port, const std::string& bytes, double seconds,
                  std::string* detail) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *detail = "connect failed";
    close(fd);
    return false;
  }
  send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  size_t answered = 0;
  bool dropped = false;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      dropped = true;
      break;
    }
    answered += static_cast<size_t>(n);
  }
  close(fd);
  *detail = "server answered " + std::to_string(answered) + " bytes, then " +
            (dropped ? "closed the connection" : "kept it open");
  return dropped;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: stranger HOST:PORT TOKEN MAX_MESSAGE_BYTES\n");
    return 2;
  }
  const std::string target = argv[1];
  const std::string token = argv[2];
  const long max_bytes = std::atol(argv[3]);
  const std::string host = target.substr(0, target.rfind(':'));
  const int port = std::atoi(target.substr(target.rfind(':') + 1).c_str());
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto stub = hora::proto::Coordinator::NewStub(channel);
  using grpc::StatusCode;

  {
    grpc::ClientContext ctx;
    Prepare(&ctx, "not-the-token");
    hora::proto::JoinRequest req;
    req.set_rank(1);
    req.set_size(2);
    req.set_hostname("stranger");
    req.set_protocol_version(1);
    hora::proto::JoinResponse resp;
    grpc::Status s = stub->Join(&ctx, req, &resp);
    Check("join_wrong_token", s.error_code() == StatusCode::UNAUTHENTICATED, Describe(s));
  }
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, "");
    hora::proto::StoreGetRequest req;
    req.set_key("gloo/0");
    hora::proto::StoreGetResponse resp;
    grpc::Status s = stub->StoreGet(&ctx, req, &resp);
    Check("store_get_no_token", s.error_code() == StatusCode::UNAUTHENTICATED, Describe(s));
  }
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, token + "x");
    auto stream = stub->Session(&ctx);
    hora::proto::WorkerMessage hello;
    hello.mutable_hello()->set_rank(1);
    stream->Write(hello);
    hora::proto::WorkerMessage goodbye;
    goodbye.mutable_goodbye();
    stream->Write(goodbye);
    stream->WritesDone();
    hora::proto::CoordinatorMessage m;
    bool got = stream->Read(&m);
    grpc::Status s = stream->Finish();
    Check("session_wrong_token", !got && s.error_code() == StatusCode::UNAUTHENTICATED,
          Describe(s));
  }
  std::mt19937 rng(42);
  std::string garbage(64 << 10, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  std::string detail;
  Check("garbage_bytes", DroppedAfter(host, port, garbage, 10, &detail), detail);
  Check("http1_request", DroppedAfter(host, port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 10, &detail),
        detail);
  // An HTTP/2 preface followed by a frame of nonsense.
  std::string h2 = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  h2 += std::string("\x00\x00\x08\x99\xff\xff\xff\xff\xff", 9) + std::string(8, '\xee');
  Check("bad_http2_frame", DroppedAfter(host, port, h2, 10, &detail), detail);
  for (const std::string& t : {std::string("not-the-token"), token}) {
    grpc::ClientContext ctx;
    Prepare(&ctx, t);
    hora::proto::StoreSetRequest req;
    req.set_key("stranger/oversized");
    req.set_value(std::string(static_cast<size_t>(max_bytes) + 1024, 'x'));
    hora::proto::StoreSetResponse resp;
    grpc::Status s = stub->StoreSet(&ctx, req, &resp);
    Check(t == token ? "oversized_right_token" : "oversized_wrong_token",
          s.error_code() == StatusCode::RESOURCE_EXHAUSTED, Describe(s));
  }
  {
    grpc::ClientContext ctx;  // still refusing, still alive
    Prepare(&ctx, "not-the-token");
    hora::proto::StoreGetRequest req;
    req.set_key("gloo/0");
    hora::proto::StoreGetResponse resp;
    grpc::Status s = stub->StoreGet(&ctx, req, &resp);
    Check("still_refusing", s.error_code() == StatusCode::UNAUTHENTICATED, Describe(s));
  }
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
