// TLS between the client and the coordinator: mutual TLS (the server has a CA and requires a
// client certificate), server-only TLS (no CA at the server), and the refusals: plaintext,
// a client that trusts another CA, a client certificate from another CA, no client
// certificate where one is required, unreadable files.
//
// The certificates are made at test time with the openssl command line. openssl is a
// prerequisite (tools/setup.sh installs it): without it these tests FAIL, they do not pass
// quietly (docs/testing.md, skip policy).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "tests/coordinator/coordinator_test_util.h"

namespace hora {
namespace testing {
namespace {

// Runs a shell command in `dir`, quietly; true on exit 0.
bool Sh(const std::string& dir, const std::string& cmd) {
  return std::system(("cd " + dir + " && (" + cmd + ") >/dev/null 2>&1").c_str()) == 0;
}

// ca NAME: NAME.pem / NAME.key, a self-signed CA. EC keys: fast to make.
std::string MakeCa(const std::string& name) {
  return "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
         "-keyout " +
         name + ".key -out " + name + ".pem -days 1 -subj /CN=" + name;
}

// leaf NAME signed by CA: NAME.pem / NAME.key, with SAN 127.0.0.1 and localhost.
std::string MakeLeaf(const std::string& name, const std::string& ca) {
  return "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
         "-keyout " +
         name + ".key -out " + name + ".csr -subj /CN=" + name +
         " && "
         "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " +
         name +
         ".ext && "
         "openssl x509 -req -in " +
         name + ".csr -CA " + ca + ".pem -CAkey " + ca +
         ".key "
         "-CAcreateserial -out " +
         name + ".pem -days 1 -extfile " + name + ".ext";
}

// The files of one test: ca (server, client), other_ca (rogue_client).
struct Certs {
  std::string dir;
  std::string File(const std::string& name) const { return dir + "/" + name; }
  TlsFiles Leaf(const std::string& name, const std::string& ca) const {
    return TlsFiles{File(name + ".pem"), File(name + ".key"), ca.empty() ? "" : File(ca + ".pem")};
  }
};

Certs MakeCerts() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/hora_tls_XXXXXX";
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  INFO("openssl is required (tools/setup.sh installs it)");
  REQUIRE(Sh(dir, "command -v openssl"));
  REQUIRE(Sh(dir, MakeCa("ca") + " && " + MakeCa("other_ca") + " && " + MakeLeaf("server", "ca") +
                      " && " + MakeLeaf("client", "ca") + " && " +
                      MakeLeaf("rogue_client", "other_ca")));
  return Certs{dir};
}

// Connects one client of a 2-rank job and returns its status (the job never completes: a
// client that gets through Join waits for rank 1 until its start timeout, which is short).
Status ConnectOne(const CoordinatorConfig& config, int port, const TlsFiles& tls) {
  ClientConfig c = ClientFor(config, port, 0);
  c.start_timeout = milliseconds(1000);
  c.tls = tls;
  return CoordinatorClient::Connect(c).status();
}

// A TLS refusal is seen by the client as a channel that never connects; a client that got in
// would wait for rank 1 instead and fail later with another code.
bool Refused(const Status& s) {
  return s.code() == Code::kUnavailable &&
         s.message().find("cannot connect to the coordinator") != std::string::npos;
}

// Both ranks connect with `tls`, exchange a key and start a session.
void CheckJobWorks(const CoordinatorConfig& config, int port, const TlsFiles& tls) {
  std::vector<ClientConfig> configs;
  for (int r = 0; r < 2; ++r) {
    configs.push_back(ClientFor(config, port, r));
    configs.back().tls = tls;
  }
  std::vector<Status> errors;
  auto clients = ConnectAll(configs, &errors);
  INFO("rank 0: " << errors[0].ToString() << "; rank 1: " << errors[1].ToString());
  REQUIRE(clients[0]);
  REQUIRE(clients[1]);
  REQUIRE(clients[0]->Set("k", "over tls").ok());
  auto got = clients[1]->Get("k", milliseconds(10000));
  REQUIRE(got.ok());
  CHECK(got.value() == "over tls");
  Recorder rec;
  CHECK(clients[0]->StartSession(rec.Callbacks()).ok());
}

TEST_CASE("Mutual TLS: ranks with client certificates work; the others are refused", "[tls]") {
  Certs certs = MakeCerts();
  CoordinatorConfig config = ServiceConfig(2);
  config.tls = certs.Leaf("server", "ca");
  auto service = StartService(config);
  REQUIRE(service);
  const int port = service->port();

  SECTION("plaintext") { CHECK(Refused(ConnectOne(config, port, TlsFiles{}))); }
  SECTION("no client certificate") {
    CHECK(Refused(ConnectOne(config, port, TlsFiles{"", "", certs.File("ca.pem")})));
  }
  SECTION("a client certificate from another CA") {
    CHECK(Refused(ConnectOne(config, port, certs.Leaf("rogue_client", "ca"))));
  }
  SECTION("a client that trusts another CA") {
    CHECK(Refused(ConnectOne(config, port, certs.Leaf("client", "other_ca"))));
  }
  // After each refusal (Catch2 runs the case once per section) the service still serves a job.
  CheckJobWorks(config, port, certs.Leaf("client", "ca"));
}

TEST_CASE("Server-only TLS: a client with the CA and no certificate works", "[tls]") {
  Certs certs = MakeCerts();
  CoordinatorConfig config = ServiceConfig(2);
  config.tls = certs.Leaf("server", "");  // no CA at the server: no client certificate asked
  auto service = StartService(config);
  REQUIRE(service);
  const int port = service->port();
  SECTION("plaintext is refused") { CHECK(Refused(ConnectOne(config, port, TlsFiles{}))); }
  SECTION("a client that trusts another CA is refused") {
    CHECK(Refused(ConnectOne(config, port, TlsFiles{"", "", certs.File("other_ca.pem")})));
  }
  CheckJobWorks(config, port, TlsFiles{"", "", certs.File("ca.pem")});
}

TEST_CASE("Unreadable TLS files are an InvalidArgument naming the file", "[tls]") {
  CoordinatorConfig config = ServiceConfig(1);
  config.tls = TlsFiles{"/nonexistent/cert.pem", "/nonexistent/key.pem", ""};
  auto s = CoordinatorService::Start(config);
  CHECK(s.status().code() == Code::kInvalidArgument);
  CHECK(s.status().message().find("/nonexistent/cert.pem") != std::string::npos);

  ClientConfig c = ClientFor(ServiceConfig(1), 1, 0);
  c.tls = TlsFiles{"", "", "/nonexistent/ca.pem"};
  auto client = CoordinatorClient::Connect(c);
  CHECK(client.status().code() == Code::kInvalidArgument);
  CHECK(client.status().message().find("/nonexistent/ca.pem") != std::string::npos);
}

}  // namespace
}  // namespace testing
}  // namespace hora
