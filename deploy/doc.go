// Package deploy holds no Go code of its own: it exists so that the tests in
// this directory (deploy_test.go) can check the deployment artefacts next to
// them — NATS cluster configs and permissions, the compose file, the
// Kubernetes manifests — with `go test ./deploy/`.
package deploy
