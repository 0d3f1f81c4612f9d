package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
)

// holdWindow is how long the hold webhook keeps a request: under the API
// server's 30 s limit on a webhook call.
const holdWindow = 25 * time.Second

// applyHold is an admission webhook on the control plane that holds the
// first write of a HelmRelease by kustomize-controller for one
// Kustomization (dry-run applies included, as each apply begins with
// them) until released: that Kustomization's reconcile is then in flight,
// at a known step, for as long as the test needs, up to holdWindow.
type applyHold struct {
	held     chan struct{} // closed when the request is held
	release  chan struct{} // close to let it go
	expired  chan struct{} // closed if holdWindow ended the hold
	once     sync.Once
	freeOnce sync.Once
}

// holdApply registers the webhook for HelmReleases applied by the
// Kustomization named kustomization.
func holdApply(t *testing.T, cp *controlplane.ControlPlane, kustomization string) *applyHold {
	t.Helper()
	h := &applyHold{held: make(chan struct{}), release: make(chan struct{}), expired: make(chan struct{})}
	cert, caPEM := selfSigned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(h.serve), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() {
		h.free()
		srv.Close()
	})
	url := "https://" + ln.Addr().String() + "/"
	none, ignore, timeout := admissionregv1.SideEffectClassNone, admissionregv1.Ignore, int32(30)
	cfg := &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-" + kustomization},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name:                    "hold.tenant-worker.test",
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Update}, Rule: admissionregv1.Rule{APIGroups: []string{"helm.toolkit.fluxcd.io"}, APIVersions: []string{"*"}, Resources: []string{"helmreleases"}}}},
			SideEffects:             &none,
			FailurePolicy:           &ignore,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"kustomize.toolkit.fluxcd.io/name": kustomization}},
		}},
	}
	if _, err := cp.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cp.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
	})
	return h
}

// free lets the held request go (and every later one through).
func (h *applyHold) free() { h.freeOnce.Do(func() { close(h.release) }) }

func (h *applyHold) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	var opts struct {
		FieldManager string `json:"fieldManager"`
	}
	json.Unmarshal(review.Request.Options.Raw, &opts)
	if opts.FieldManager == "kustomize-controller" {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			select {
			case <-h.release:
			case <-time.After(holdWindow):
				close(h.expired)
			case <-r.Context().Done():
			}
		}
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	json.NewEncoder(w).Encode(review)
}

// selfSigned makes a serving certificate for 127.0.0.1 and its PEM, the
// webhook's CA bundle.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hold webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert, certPEM
}
