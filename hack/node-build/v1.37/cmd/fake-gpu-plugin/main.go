// fake-gpu-plugin: a kubelet device plugin that advertises N healthy fake GPUs.
//
// It speaks kubelet's device plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1),
// so kubelet itself puts `nvidia.com/gpu` into the node's capacity, counts it
// at pod admission (a pod asking for more than is free fails with
// OutOfnvidia.com/gpu) and hands each container the ids it was given, as
// NVIDIA_VISIBLE_DEVICES and GANG_FAKE_GPUS. No device node is mounted: the
// local real nodes have no GPUs, only the accounting is real.
//
//	fake-gpu-plugin --plugin-dir <kubelet root>/device-plugins --count 4
//
// It registers with kubelet.sock in --plugin-dir, and registers again whenever
// kubelet restarts (its socket is recreated).
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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

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

func register(kubeletSocket, endpoint, resource string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: resource,
	})
	return err
}

// inode of path, 0 when it does not exist: a new kubelet.sock has a new inode.
func inode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

func main() {
	pluginDir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "kubelet's device plugin directory (holds kubelet.sock)")
	count := flag.Int("count", 4, "how many fake devices to advertise")
	resource := flag.String("resource", "nvidia.com/gpu", "extended resource name")
	flag.Parse()

	endpoint := "fake-gpu.sock"
	socket := filepath.Join(*pluginDir, endpoint)
	kubeletSocket := filepath.Join(*pluginDir, "kubelet.sock")
	p := &plugin{}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("fake-gpu-%d", i), Health: pluginapi.Healthy})
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	var server *grpc.Server
	var registered uint64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		// kubelet removes every socket in its plugin dir when it starts: serve
		// afresh and register again whenever kubelet.sock is new or ours is gone.
		current := inode(kubeletSocket)
		if current != 0 && (current != registered || inode(socket) == 0) {
			if server != nil {
				server.Stop()
			}
			_ = os.Remove(socket)
			lis, err := net.Listen("unix", socket)
			if err != nil {
				log.Fatalf("listen %s: %v", socket, err)
			}
			server = grpc.NewServer()
			pluginapi.RegisterDevicePluginServer(server, p)
			go func(s *grpc.Server) { _ = s.Serve(lis) }(server)
			if err := register(kubeletSocket, endpoint, *resource); err != nil {
				log.Printf("register with %s: %v (retrying)", kubeletSocket, err)
			} else {
				registered = current
				log.Printf("registered %d x %s with %s", *count, *resource, kubeletSocket)
			}
		}
		select {
		case <-stop:
			if server != nil {
				server.Stop()
			}
			_ = os.Remove(socket)
			return
		case <-tick.C:
		}
	}
}
