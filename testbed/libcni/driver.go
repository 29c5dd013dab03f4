// Command driver runs one CNI verb through libcni, the library containerd and CRI-O use, so that
// the tests see our plugin exactly as a container runtime does: libcni builds the per-plugin
// config (prevResult, runtimeConfig, injected GC keys), execs the plugins, caches results and
// parses every result with its own types. Output is always one JSON document on stdout:
//
//	success: the ADD result, the VERSION info, or {}
//	failure: {"error": "...", "code": N, "msg": "...", "details": "..."} where code is the CNI
//	         error code the failing plugin printed (0 when libcni itself refused, with no plugin
//	         error), and the exit status is 1 (2 for a bad command line).
//
// Built offline in GOPATH mode against the unpacked libcni 1.3.0 (see testbed/libcni/__init__.py).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
)

type options struct {
	conflist         string
	containerID      string
	netns            string
	ifname           string
	validAttachments string
	binDir           string
	cacheDir         string
	args             string
	capabilityArgs   string
	gcKey            string
	plugin           string
	timeout          time.Duration
}

// usageError marks a bad command line, reported with exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func parseOptions(argv []string) (string, *options, error) {
	if len(argv) < 1 {
		return "", nil, &usageError{"usage: driver <add|check|del|gc|status|version> [flags]"}
	}
	verb := argv[0]
	switch verb {
	case "add", "check", "del", "gc", "status", "version":
	default:
		return "", nil, &usageError{fmt.Sprintf("unknown verb %q (want add|check|del|gc|status|version)", verb)}
	}
	o := &options{}
	fs := flag.NewFlagSet("driver "+verb, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.StringVar(&o.conflist, "conflist", "", "network configuration list file")
	fs.StringVar(&o.containerID, "container-id", "", "CNI_CONTAINERID")
	fs.StringVar(&o.netns, "netns", "", "CNI_NETNS")
	fs.StringVar(&o.ifname, "ifname", "eth0", "CNI_IFNAME")
	fs.StringVar(&o.validAttachments, "valid-attachments", "",
		`GC: JSON list of {"containerID": ..., "ifname": ...}`)
	fs.StringVar(&o.binDir, "bin-dir", "/opt/cni/bin", "plugin directories, ':'-separated")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "libcni result cache directory")
	fs.StringVar(&o.args, "args", "", "CNI_ARGS as K=V;K=V")
	fs.StringVar(&o.capabilityArgs, "capability-args", "", "JSON object of runtime capability args")
	fs.StringVar(&o.gcKey, "gc-key", "both",
		"GC: 'both' (libcni's GCNetworkList), or send only 'valid-attachments' or 'attachments'")
	fs.StringVar(&o.plugin, "plugin", "", "VERSION: plugin type to ask (default: every plugin in the list)")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "deadline for the whole operation")
	if err := fs.Parse(argv[1:]); err != nil {
		return "", nil, &usageError{err.Error()}
	}
	if fs.NArg() != 0 {
		return "", nil, &usageError{fmt.Sprintf("unexpected arguments: %v", fs.Args())}
	}
	return verb, o, nil
}

func parsePluginArgs(s string) ([][2]string, error) {
	var out [][2]string
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, &usageError{fmt.Sprintf("--args: %q is not K=V", kv)}
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

func runtimeConf(o *options) (*libcni.RuntimeConf, error) {
	pluginArgs, err := parsePluginArgs(o.args)
	if err != nil {
		return nil, err
	}
	rt := &libcni.RuntimeConf{
		ContainerID: o.containerID, NetNS: o.netns, IfName: o.ifname, Args: pluginArgs,
	}
	if o.capabilityArgs != "" {
		if err := json.Unmarshal([]byte(o.capabilityArgs), &rt.CapabilityArgs); err != nil {
			return nil, &usageError{fmt.Sprintf("--capability-args: %v", err)}
		}
	}
	return rt, nil
}

func newCNI(o *options) *libcni.CNIConfig {
	// Keep the plugins' stderr visible (libcni drops it otherwise): it is the first thing to read
	// when a conformance test fails.
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}}
	return libcni.NewCNIConfigWithCacheDir(filepath.SplitList(o.binDir), o.cacheDir, exec)
}

func loadList(o *options) (*libcni.NetworkConfigList, error) {
	if o.conflist == "" {
		return nil, &usageError{"--conflist is required"}
	}
	return libcni.ConfListFromFile(o.conflist)
}

func run(ctx context.Context, verb string, o *options) (interface{}, error) {
	if verb == "version" {
		return versions(ctx, o)
	}
	list, err := loadList(o)
	if err != nil {
		return nil, err
	}
	cni := newCNI(o)
	switch verb {
	case "add", "check", "del":
		rt, err := runtimeConf(o)
		if err != nil {
			return nil, err
		}
		return attachment(ctx, cni, verb, list, rt)
	case "gc":
		return struct{}{}, gc(ctx, cni, list, o)
	case "status":
		return struct{}{}, cni.GetStatusNetworkList(ctx, list)
	}
	return nil, &usageError{fmt.Sprintf("unknown verb %q", verb)}
}

func attachment(ctx context.Context, cni *libcni.CNIConfig, verb string,
	list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (interface{}, error) {
	switch verb {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			return nil, err
		}
		return result, nil
	case "check":
		return struct{}{}, cni.CheckNetworkList(ctx, list, rt)
	default:
		return struct{}{}, cni.DelNetworkList(ctx, list, rt)
	}
}

func gc(ctx context.Context, cni *libcni.CNIConfig, list *libcni.NetworkConfigList, o *options) error {
	var args *libcni.GCArgs
	if o.validAttachments != "" {
		args = &libcni.GCArgs{}
		if err := json.Unmarshal([]byte(o.validAttachments), &args.ValidAttachments); err != nil {
			return &usageError{fmt.Sprintf("--valid-attachments: %v", err)}
		}
	}
	switch o.gcKey {
	case "both":
		return cni.GCNetworkList(ctx, list, args)
	case "valid-attachments", "attachments":
		return gcOneKey(ctx, cni, list, args, "cni.dev/"+o.gcKey)
	}
	return &usageError{fmt.Sprintf("--gc-key: unknown value %q", o.gcKey)}
}

// gcOneKey sends GC to every plugin with the attachments under a single key. libcni always sends
// both the spec's key and the older misspelled one (containernetworking/cni#1101), so a plugin
// that reads only one of them would pass unnoticed; this path tells the two apart. It reuses
// libcni's own pieces (InjectConf, the invoke package) and skips only the cache-driven DELs.
func gcOneKey(ctx context.Context, cni *libcni.CNIConfig, list *libcni.NetworkConfigList,
	args *libcni.GCArgs, key string) error {
	inject := map[string]interface{}{"name": list.Name, "cniVersion": list.CNIVersion}
	if args != nil {
		inject[key] = args.ValidAttachments
	}
	var errs []error
	for _, plugin := range list.Plugins {
		conf, err := libcni.InjectConf(plugin, inject)
		if err != nil {
			return err
		}
		path, err := invoke.FindInPath(plugin.Network.Type, cni.Path)
		if err != nil {
			return err
		}
		invokeArgs := &invoke.Args{Command: "GC", Path: strings.Join(cni.Path, ":")}
		if err := invoke.ExecPluginWithoutResult(ctx, path, conf.Bytes, invokeArgs, nil); err != nil {
			errs = append(errs, fmt.Errorf("failed to GC plugin %s: %w", plugin.Network.Type, err))
		}
	}
	return errors.Join(errs...)
}

type versionInfo struct {
	SupportedVersions []string `json:"supportedVersions"`
}

// versions answers {"<plugin type>": {"supportedVersions": [...]}}, as libcni decoded it.
func versions(ctx context.Context, o *options) (interface{}, error) {
	pluginTypes := []string{o.plugin}
	if o.plugin == "" {
		list, err := loadList(o)
		if err != nil {
			return nil, err
		}
		pluginTypes = pluginTypes[:0]
		for _, p := range list.Plugins {
			pluginTypes = append(pluginTypes, p.Network.Type)
		}
	}
	cni := newCNI(o)
	out := map[string]versionInfo{}
	for _, t := range pluginTypes {
		info, err := cni.GetVersionInfo(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("plugin %s failed (version): %w", t, err)
		}
		out[t] = versionInfo{SupportedVersions: info.SupportedVersions()}
	}
	return out, nil
}

type failure struct {
	Error   string `json:"error"`
	Code    uint   `json:"code"`
	Msg     string `json:"msg,omitempty"`
	Details string `json:"details,omitempty"`
}

func fail(err error) int {
	f := failure{Error: err.Error()}
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		f.Code, f.Msg, f.Details = cniErr.Code, cniErr.Msg, cniErr.Details
	}
	_ = json.NewEncoder(os.Stdout).Encode(f)
	var usage *usageError
	if errors.As(err, &usage) {
		return 2
	}
	return 1
}

func main() {
	verb, o, err := parseOptions(os.Args[1:])
	if err != nil {
		os.Exit(fail(err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	out, err := run(ctx, verb, o)
	cancel()
	if err != nil {
		os.Exit(fail(err))
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(fail(err))
	}
}
