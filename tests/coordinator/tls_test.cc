// TLS between the client and the coordinator, with client certificates. The certificates are
// made at test time with the openssl command line (the test is skipped without it).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "tests/coordinator/coordinator_test_util.h"

namespace hora {
namespace testing {
namespace {

// Writes ca.pem, server.{pem,key} (SAN 127.0.0.1) and client.{pem,key} into `dir`.
bool MakeCertificates(const std::string& dir) {
  const std::string cmd =
      "cd " + dir + " && "
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
      "-subj /CN=hora-test-ca && "
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
      "-subj /CN=localhost && "
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "-out server.pem -days 1 -extfile san.ext && "
      "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr "
      "-subj /CN=hora-rank && "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "-out client.pem -days 1";
  return std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()) == 0;
}

TEST_CASE("TLS with client certificates; a plaintext client is refused", "[tls]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/hora_tls_XXXXXX";
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  if (!MakeCertificates(dir)) {
    WARN("openssl is not usable here; skipping the TLS test");
    return;
  }
  CoordinatorConfig config = ServiceConfig(2);
  config.tls = TlsFiles{dir + "/server.pem", dir + "/server.key", dir + "/ca.pem"};
  auto service = StartService(config);
  REQUIRE(service);

  ClientConfig plain = ClientFor(config, service->port(), 0);
  plain.start_timeout = milliseconds(500);
  auto refused = CoordinatorClient::Connect(plain);
  CHECK(refused.status().code() == Code::kUnavailable);

  std::vector<ClientConfig> configs;
  for (int r = 0; r < 2; ++r) {
    configs.push_back(ClientFor(config, service->port(), r));
    configs.back().tls = TlsFiles{dir + "/client.pem", dir + "/client.key", dir + "/ca.pem"};
  }
  std::vector<Status> errors;
  auto clients = ConnectAll(configs, &errors);
  INFO(errors[0].ToString());
  REQUIRE(clients[0]);
  REQUIRE(clients[1]);
  REQUIRE(clients[0]->Set("k", "over tls").ok());
  CHECK(clients[1]->Get("k", milliseconds(1000)).value() == "over tls");
  Recorder rec;
  REQUIRE(clients[0]->StartSession(rec.Callbacks()).ok());
}

TEST_CASE("Unreadable TLS files are an InvalidArgument naming the file", "[tls]") {
  CoordinatorConfig config = ServiceConfig(1);
  config.tls = TlsFiles{"/nonexistent/cert.pem", "/nonexistent/key.pem", ""};
  auto s = CoordinatorService::Start(config);
  CHECK(s.status().code() == Code::kInvalidArgument);
  CHECK(s.status().message().find("/nonexistent/cert.pem") != std::string::npos);
}

}  // namespace
}  // namespace testing
}  // namespace hora
