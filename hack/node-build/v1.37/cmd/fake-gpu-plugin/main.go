// fake-gpu-plugin: a kubelet device plugin that advertises N healthy fake GPUs.
//
// It speaks kubelet's device plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1),
// so kubelet itself puts `nvidia.com/gpu` into the node's capacity, counts it
// at pod admission (a pod asking for more than is free fails with
// OutOfnvidia.com/gpu) and hands each container the ids it was given, as
// NVIDIA_VISIBLE_DEVICES and GANG_FAKE_GPUS. No device node is mounted: the
// local real nodes have no GPUs, only the accounting is real.
//
//	fake-gpu-plugin --registry-dir <kubelet root>/plugins_registry --count 4
//
// It registers through kubelet's plugin watcher (a socket in the kubelet's
// plugins_registry directory answering the pluginregistration API), not through
// kubelet.sock: that socket's path is fixed (/var/lib/kubelet/device-plugins),
// so on a host with several kubelets it belongs to whichever started last,
// while plugins_registry lives under each kubelet's --root-dir. One socket
// serves both APIs; kubelet finds it again after a restart by itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// registration answers kubelet's plugin watcher: what this socket serves.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	resource, endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{
		Type:              registerapi.DevicePlugin,
		Name:              r.resource,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{pluginapi.Version},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if status.PluginRegistered {
		log.Printf("registered %s with kubelet", r.resource)
	} else {
		log.Printf("kubelet refused the registration of %s: %s", r.resource, status.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once and then holds the stream open: the
// fake devices never change health.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := strings.Join(c.DevicesIds, ",")
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": ids, "GANG_FAKE_GPUS": ids},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func main() {
	registryDir := flag.String("registry-dir", "/var/lib/kubelet/plugins_registry", "kubelet's plugin watcher directory (<root-dir>/plugins_registry)")
	count := flag.Int("count", 4, "how many fake devices to advertise")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	flag.Parse()

	socket := filepath.Join(*registryDir, "fake-gpu.sock")
	p := &plugin{}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("fake-gpu-%d", i), Health: pluginapi.Healthy})
	}
	if err := os.MkdirAll(*registryDir, 0o750); err != nil {
		log.Fatalf("mkdir %s: %v", *registryDir, err)
	}
	_ = os.Remove(socket)
	lis, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatalf("listen %s: %v", socket, err)
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	registerapi.RegisterRegistrationServer(server, &registration{resource: *resource, endpoint: socket})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("serving %d x %s on %s", *count, *resource, socket)
	if err := server.Serve(lis); err != nil {
		log.Printf("serve: %v", err)
	}
	_ = os.Remove(socket)
}
