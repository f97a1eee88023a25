package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
)

// startAuthServer starts a loopback nats-server with JetStream and the auth
// settings of opts, stopped when the test ends.
func startAuthServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.NoLog, opts.NoSigs = os.Getenv("JETPOOL_TEST_SERVER_LOG") == "", true // set it to see the server's log
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	if !opts.NoLog {
		s.ConfigureLogger()
	}
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// statusWith runs `jetpool status` with env and returns the result.
func statusWith(t testing.TB, env map[string]string) result {
	t.Helper()
	return jetpool(t, env, "status")
}

// Credentials come from the environment: the right ones work, wrong or
// missing ones fail at once with an error that says what was refused.
func TestAuthFromEnvironment(t *testing.T) {
	t.Parallel()
	t.Run("user and password", func(t *testing.T) {
		t.Parallel()
		s := startAuthServer(t, &server.Options{Username: "jp", Password: "s3cret-pw"})
		url := s.ClientURL()
		ok := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_USER": "jp", "JETPOOL_NATS_PASSWORD": "s3cret-pw"})
		require.Zero(t, ok.code, ok.stderr)
		assert.Contains(t, ok.stdout, "no jobs")

		bad := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_USER": "jp", "JETPOOL_NATS_PASSWORD": "wrong"})
		assert.NotZero(t, bad.code)
		assert.Contains(t, bad.stderr, "connect to NATS at "+url)
		assert.Contains(t, strings.ToLower(bad.stderr), "authorization violation")
		assert.NotContains(t, bad.stderr, "wrong", "the password is never printed")
		assert.Less(t, bad.took, 10*time.Second, "a refused login fails at once, no endless reconnect")

		none := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url})
		assert.NotZero(t, none.code)
		assert.Contains(t, strings.ToLower(none.stderr), "authorization violation")
	})
	t.Run("token", func(t *testing.T) {
		t.Parallel()
		s := startAuthServer(t, &server.Options{Authorization: "tok-e2e-1234"})
		url := s.ClientURL()
		ok := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_TOKEN": "tok-e2e-1234"})
		require.Zero(t, ok.code, ok.stderr)
		assert.Contains(t, ok.stdout, "no jobs")
		bad := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_TOKEN": "tok-wrong"})
		assert.NotZero(t, bad.code)
		assert.Contains(t, strings.ToLower(bad.stderr), "authorization violation")
		assert.NotContains(t, bad.stderr, "tok-wrong")
	})
	t.Run("nkey", func(t *testing.T) {
		t.Parallel()
		user, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, err := user.PublicKey()
		require.NoError(t, err)
		seed, err := user.Seed()
		require.NoError(t, err)
		seedFile := filepath.Join(t.TempDir(), "user.nk")
		require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
		s := startAuthServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
		url := s.ClientURL()
		ok := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_NKEY": seedFile})
		require.Zero(t, ok.code, ok.stderr)
		assert.Contains(t, ok.stdout, "no jobs")

		other, err := nkeys.CreateUser()
		require.NoError(t, err)
		otherSeed, err := other.Seed()
		require.NoError(t, err)
		otherFile := filepath.Join(t.TempDir(), "other.nk")
		require.NoError(t, os.WriteFile(otherFile, otherSeed, 0o600))
		bad := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_NKEY": otherFile})
		assert.NotZero(t, bad.code)
		assert.Contains(t, strings.ToLower(bad.stderr), "authorization violation")
		assert.NotContains(t, bad.stderr, string(otherSeed), "the seed is never printed")

		missing := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_NKEY": filepath.Join(t.TempDir(), "nope.nk")})
		assert.NotZero(t, missing.code)
		assert.Contains(t, missing.stderr, "nope.nk")
	})
	t.Run("creds (operator mode, JWT)", func(t *testing.T) {
		t.Parallel()
		op, err := nkeys.CreateOperator()
		require.NoError(t, err)
		opPub, err := op.PublicKey()
		require.NoError(t, err)
		opClaims := jwt.NewOperatorClaims(opPub)
		opJWT, err := opClaims.Encode(op)
		require.NoError(t, err)
		opDecoded, err := jwt.DecodeOperatorClaims(opJWT)
		require.NoError(t, err)

		account := func(js bool) (nkeys.KeyPair, string, string) {
			kp, err := nkeys.CreateAccount()
			require.NoError(t, err)
			pub, err := kp.PublicKey()
			require.NoError(t, err)
			ac := jwt.NewAccountClaims(pub)
			if js { // the system account may not have JetStream
				ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
			}
			tok, err := ac.Encode(op)
			require.NoError(t, err)
			return kp, pub, tok
		}
		_, sysPub, sysJWT := account(false)
		accKP, accPub, accJWT := account(true)
		resolver := &server.MemAccResolver{}
		require.NoError(t, resolver.Store(sysPub, sysJWT))
		require.NoError(t, resolver.Store(accPub, accJWT))
		s := startAuthServer(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{opDecoded}, AccountResolver: resolver,
			SystemAccount: sysPub})

		user, err := nkeys.CreateUser()
		require.NoError(t, err)
		userPub, err := user.PublicKey()
		require.NoError(t, err)
		uc := jwt.NewUserClaims(userPub)
		uc.IssuerAccount = accPub
		userJWT, err := uc.Encode(accKP)
		require.NoError(t, err)
		userSeed, err := user.Seed()
		require.NoError(t, err)
		creds, err := jwt.FormatUserConfig(userJWT, userSeed)
		require.NoError(t, err)
		credsFile := filepath.Join(t.TempDir(), "user.creds")
		require.NoError(t, os.WriteFile(credsFile, creds, 0o600))

		url := s.ClientURL()
		ok := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_CREDS": credsFile})
		require.Zero(t, ok.code, ok.stderr)
		assert.Contains(t, ok.stdout, "no jobs")

		none := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url})
		assert.NotZero(t, none.code)
		assert.Contains(t, strings.ToLower(none.stderr), "authorization violation")
	})
	t.Run("TLS with client certificates", func(t *testing.T) {
		t.Parallel()
		pki := newPKI(t)
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.serverCert, KeyFile: pki.serverKey, CaFile: pki.ca, Verify: true})
		require.NoError(t, err)
		s := startAuthServer(t, &server.Options{TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 2})
		url := s.ClientURL()
		require.True(t, strings.HasPrefix(url, "tls://") || strings.HasPrefix(url, "nats://"), url)

		env := map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_TLS_CA": pki.ca,
			"JETPOOL_NATS_TLS_CERT": pki.clientCert, "JETPOOL_NATS_TLS_KEY": pki.clientKey}
		ok := statusWith(t, env)
		require.Zero(t, ok.code, ok.stderr)
		assert.Contains(t, ok.stdout, "no jobs")

		// The server's CA, but no client certificate: refused by the server.
		noCert := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_TLS_CA": pki.ca})
		assert.Equal(t, 2, noCert.code, "refused credentials are configuration: %s", noCert.stderr)
		assert.Contains(t, noCert.stderr, "connect to NATS at")
		// A client certificate from another CA: refused too.
		other := newPKI(t)
		wrong := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_TLS_CA": pki.ca,
			"JETPOOL_NATS_TLS_CERT": other.clientCert, "JETPOOL_NATS_TLS_KEY": other.clientKey})
		assert.Equal(t, 2, wrong.code, wrong.stderr)
		// A missing file is named.
		missing := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_TLS_CA": pki.ca,
			"JETPOOL_NATS_TLS_CERT": filepath.Join(t.TempDir(), "nope.pem"), "JETPOOL_NATS_TLS_KEY": pki.clientKey})
		assert.Equal(t, 2, missing.code, "a configuration error")
		assert.Regexp(t, regexp.MustCompile(`JETPOOL_NATS_TLS_CERT: stat .*nope\.pem`), missing.stderr)
	})
}

// pki is a throwaway CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t testing.TB) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jetpool e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	p := pki{ca: writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	// Sanity: the pair loads as the broker will load it.
	_, err = tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	require.NoError(t, err)
	return p
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return path
}

// deployServer starts a loopback nats-server with the accounts file the
// cluster ships with (deploy/nats/accounts.conf) and returns its URL and
// the environment of a jetpool child as one of its users (deployUser:
// "dispatcher", "worker", "viewer", "operator" of tenant acme, or
// "<tenant>-<role>").
func deployServer(t testing.TB) (string, func(user string) map[string]string) {
	t.Helper()
	// The shipped accounts file with its $NATS_*_PASSWORD references filled
	// in: the server would read them from the environment, and a variable of
	// an including file does not reach into an include, so this keeps the
	// test free of a process-wide Setenv (and parallel).
	data, err := os.ReadFile("../deploy/nats/accounts.conf")
	require.NoError(t, err)
	accounts := string(data)
	for k, v := range deployPasswords {
		require.Contains(t, accounts, "$"+k)
		accounts = strings.ReplaceAll(accounts, "$"+k, v)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(accounts), 0o600))
	conf := filepath.Join(dir, "server.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`listen: 127.0.0.1:-1
jetstream {
  max_memory_store: 128MB
  max_file_store: 16GB
}
include accounts.conf
`), 0o600))
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	s := startAuthServer(t, opts)
	url := s.ClientURL()
	return url, func(user string) map[string]string {
		return map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_USER": deployUser(user), "JETPOOL_NATS_PASSWORD": deployPassword(user),
			"JETPOOL_ACK_WAIT": "5s", "JETPOOL_LOG_LEVEL": "info"}
	}
}

// The tenants and roles of deploy/nats/accounts.conf.
var (
	deployTenants = []string{"acme", "globex"}
	deployRoles   = []string{"dispatcher", "worker", "viewer", "operator"}
)

// deployPasswords fill the $NATS_<TENANT>_<ROLE>_PASSWORD and
// $NATS_SYS_PASSWORD references of deploy/nats/accounts.conf.
var deployPasswords = func() map[string]string {
	pw := map[string]string{"NATS_SYS_PASSWORD": "sysTestPw1"}
	for _, t := range deployTenants {
		for _, r := range deployRoles {
			pw[deployPasswordVar(t+"-"+r)] = t + r + "TestPw1"
		}
	}
	return pw
}()

// deployUser is a deploy user's name: a role alone is tenant acme's.
func deployUser(user string) string {
	if !strings.Contains(user, "-") && user != "sys" {
		return "acme-" + user
	}
	return user
}

func deployPasswordVar(user string) string {
	return "NATS_" + strings.ToUpper(strings.ReplaceAll(deployUser(user), "-", "_")) + "_PASSWORD"
}

func deployPassword(user string) string { return deployPasswords[deployPasswordVar(user)] }

// The deploy/ permissions, end to end: the accounts file the cluster ships
// with, a `jetpool dispatch` as the dispatcher user and a `jetpool worker`
// as the worker user.
func TestDeployPermissionsEndToEnd(t *testing.T) {
	t.Parallel()
	_, as := deployServer(t)
	wfPath := filepath.Join(t.TempDir(), "workflow.yaml")
	require.NoError(t, os.WriteFile(wfPath, []byte(simYAML(20*time.Millisecond, "")), 0o600))

	d := jetpool(t, as("dispatcher"), "dispatch", wfPath, "--input", testenv.Records(t, 30), "--job", "perm", "--no-preflight")
	require.Zero(t, d.code, "dispatch as the dispatcher user:\n%s", d.stderr)

	w := start(t, as("worker"), "worker", "--concurrency", "8")
	w.waitOutput(t, regexp.MustCompile(`worker started`), 20*time.Second)

	op := as("operator")
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := jobStatus(t, op, "perm")
		return s.Succeeded == 30
	}, "job worked by the worker user")
	require.NotContains(t, w.stderr.String(), "Permissions Violation")
}

// As the deployed dispatcher user (deploy/nats/accounts.conf): an input
// whose last line is bad is refused (exit 2, the line named) after the
// pass had begun publishing it, and what it published is removed with the
// rights the dispatcher has (the work stream's purge, its own job
// entries): no job is left, no work, no permission violation; the input
// fixed, the same job id runs every record.
func TestDispatcherRefusesABadInputWithItsOwnRights(t *testing.T) {
	t.Parallel()
	_, as := deployServer(t)
	dir := t.TempDir()
	wfPath := filepath.Join(dir, "workflow.yaml")
	require.NoError(t, os.WriteFile(wfPath, []byte(simYAML(0, "")), 0o600))
	var in strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&in, "{\"id\":\"r%d\",\"text\":\"record %d\"}\n", i, i)
	}
	bad := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(in.String()+"{\"id\":\"r2001\",\"text\":\n"), 0o600))
	d := jetpool(t, as("dispatcher"), "dispatch", wfPath, "--input", bad, "--job", "refused", "--no-preflight")
	require.Equal(t, 2, d.code, d.stderr)
	require.Contains(t, d.stderr, "in.jsonl:2001: malformed JSON")
	require.NotContains(t, d.stderr, "Permissions Violation")
	require.NotContains(t, d.stderr, "could not be removed")

	op := as("operator")
	st := jetpool(t, op, "status", "refused")
	require.NotZero(t, st.code, "no job is left: %s", st.stdout)

	good := filepath.Join(dir, "good.jsonl")
	require.NoError(t, os.WriteFile(good, []byte(in.String()), 0o600))
	d = jetpool(t, as("dispatcher"), "dispatch", wfPath, "--input", good, "--job", "refused", "--no-preflight")
	require.Zero(t, d.code, d.stderr)
	require.Contains(t, d.stderr, "2000 records published")
	w := start(t, as("worker"), "worker", "--concurrency", "16")
	testenv.Eventually(t, 60*time.Second, func() bool {
		return jobStatus(t, op, "refused").Succeeded == 2000
	}, "every record of the fixed input ran")
	require.NotContains(t, w.stderr.String(), "Permissions Violation")
}
