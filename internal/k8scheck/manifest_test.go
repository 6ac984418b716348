package k8scheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// examples is where the shipped manifests live, relative to this package.
const examples = "../../docs/examples"

// decoder is the API machinery's universal deserializer for batch/v1 and core/v1 in strict mode:
// an unknown or duplicate field, a wrong type or an unregistered kind is an error, as on an API
// server asked for fieldValidation=Strict.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{batchv1.AddToScheme, corev1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// shardFlag finds distill's or student eval's --shard argument.
var shardFlag = regexp.MustCompile(`--shard[ =](\S+)/(\S+)`)

// checkIndexedJob applies the API server's rules for an Indexed Job that this project relies on,
// and checks that the command splits the run into exactly spec.completions shards by the pod's
// completion index.
func checkIndexedJob(j *batchv1.Job) error {
	sp := j.Spec
	if sp.CompletionMode == nil || *sp.CompletionMode != batchv1.IndexedCompletion {
		return fmt.Errorf("spec.completionMode is not Indexed")
	}
	if sp.Completions == nil || *sp.Completions < 1 {
		return fmt.Errorf("spec.completions: required for an Indexed Job")
	}
	if sp.Parallelism != nil && *sp.Parallelism < 0 {
		return fmt.Errorf("spec.parallelism %d is negative", *sp.Parallelism)
	}
	rp := sp.Template.Spec.RestartPolicy
	if rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
		return fmt.Errorf("spec.template.spec.restartPolicy %q: a Job's pods restart Never or OnFailure", rp)
	}
	if sp.BackoffLimitPerIndex != nil && rp != corev1.RestartPolicyNever {
		return fmt.Errorf("spec.backoffLimitPerIndex needs restartPolicy Never, not %q", rp)
	}
	if len(sp.Template.Spec.Containers) == 0 {
		return fmt.Errorf("spec.template.spec.containers: none")
	}
	volumes := map[string]bool{}
	for _, v := range sp.Template.Spec.Volumes {
		volumes[v.Name] = true
	}
	shards := 0
	for _, c := range sp.Template.Spec.Containers {
		if c.Name == "" || c.Image == "" {
			return fmt.Errorf("container %q: name and image are required", c.Name)
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				return fmt.Errorf("container %s mounts volume %q, which the pod does not declare", c.Name, m.Name)
			}
		}
		cmd := strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
		m := shardFlag.FindStringSubmatch(cmd)
		if m == nil {
			continue
		}
		shards++
		if m[1] != "${JOB_COMPLETION_INDEX}" && m[1] != "$JOB_COMPLETION_INDEX" {
			return fmt.Errorf("container %s: --shard %s/%s does not take the index from JOB_COMPLETION_INDEX", c.Name, m[1], m[2])
		}
		if n, err := strconv.Atoi(m[2]); err != nil || n != int(*sp.Completions) {
			return fmt.Errorf("container %s: --shard .../%s, but spec.completions is %d", c.Name, m[2], *sp.Completions)
		}
		if !strings.Contains(cmd, "--out") || !strings.Contains(cmd[strings.Index(cmd, "--out"):], "JOB_COMPLETION_INDEX") {
			return fmt.Errorf("container %s: --out does not name a dir per index, so the shards would share one run dir", c.Name)
		}
	}
	if shards == 0 {
		return fmt.Errorf("no container runs with --shard")
	}
	return nil
}

func checkManifest(dec runtime.Decoder, data []byte) error {
	obj, gvk, err := dec.Decode(data, nil, nil)
	if err != nil {
		return err
	}
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return fmt.Errorf("a %s, want a batch/v1 Job", gvk)
	}
	return checkIndexedJob(j)
}

// TestManifests decodes every shipped manifest strictly and checks it as an Indexed Job.
func TestManifests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examples, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", examples)
	}
	dec := decoder(t)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkManifest(dec, data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestManifestCheckFails shows that the check refuses broken variants of the shipped manifest.
func TestManifestCheckFails(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(examples, "distill-indexed-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := decoder(t)
	for _, c := range []struct{ name, old, new, want string }{
		{"misspelled field", "completionMode: Indexed", "completionMod: Indexed", "unknown field"},
		{"duplicate field", "parallelism: 8", "parallelism: 8\n  parallelism: 4", "already set"},
		{"wrong type", "completions: 8", "completions: eight", "completions"},
		{"shard count", "completions: 8", "completions: 6", "spec.completions is 6"},
		{"restart policy", "restartPolicy: Never", "restartPolicy: OnFailure", "needs restartPolicy Never"},
		{"not indexed", "completionMode: Indexed", "completionMode: NonIndexed", "not Indexed"},
		{"undeclared volume", "- name: config\n          configMap", "- name: cfg\n          configMap", "does not declare"},
	} {
		if !bytes.Contains(data, []byte(c.old)) {
			t.Fatalf("%s: the manifest has no %q to change", c.name, c.old)
		}
		bad := bytes.Replace(data, []byte(c.old), []byte(c.new), 1)
		if err := checkManifest(dec, bad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}
