package critest

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tidalqos/tidal/tests/testutil"
)

// ImageEntrypoint is where ImportImage puts the binary in the image, and the image's
// entrypoint: CreateContainer's args are its arguments.
const ImageEntrypoint = "/entrypoint"

// BuildStatic builds the Go main package pkg (an import path in this module, e.g.
// github.com/tidalqos/tidal/cmd/tidal) as a static binary (CGO_ENABLED=0: the images hold
// nothing else, no libc) into the test's temporary folder and returns its path.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatalf("critest: %v", err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command(goTool(), "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("critest: go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// goTool is the go command: the one on PATH, else the usual install folder.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// ImportImage packs binary as an OCI image named ref (a single layer holding it at
// ImageEntrypoint, linux/<arch> in its config: containerd refuses images without a platform)
// and imports it into the runtime's k8s.io namespace (CRI's) with the runtime's own ctr. It
// returns once CRI lists the image.
func (r *Runtime) ImportImage(t testing.TB, ref string, binary string) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatalf("critest: image ref %q: %v", ref, err)
	}
	img, err := buildImage(binary)
	if err != nil {
		t.Fatalf("critest: image %s: %v", ref, err)
	}
	file := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		t.Fatalf("critest: write image %s: %v", ref, err)
	}
	cmd := exec.Command(r.ctr, "-a", r.socket, "-n", "k8s.io", "images", "import",
		"--snapshotter", r.snapshotter, file)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("critest: %s images import %s: %v\n%s", r.ctr, ref, err, b)
	}
	// CRI learns of the image from containerd's events: wait until it resolves the name.
	_, is := r.CRI(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		resp, err := is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		cancel()
		if err == nil && resp.GetImage() != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("critest: %s: imported image %s not visible over CRI (%v)", r.Name, ref, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// buildImage makes a one-layer OCI image holding binary at ImageEntrypoint.
func buildImage(binary string) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// runc creates the mount points it needs (/proc, /dev, /etc/hosts, ...) itself.
	hdr := &tar.Header{Name: strings.TrimPrefix(ImageEntrypoint, "/"), Mode: 0o755, Size: int64(len(data)),
		Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{ImageEntrypoint}
	cfg.Config.Env = []string{"PATH=/"}
	return mutate.ConfigFile(img, cfg)
}
