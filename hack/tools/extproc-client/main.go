// extproc-client asks an Endpoint Picker which endpoint it picks, the way a gateway does.
//
// Why: the e2e tier runs the Gateway API Inference Extension's Endpoint Picker (EPP) against real
// vLLM engines without an Envoy in front of it. This program stands in for the proxy: for every
// JSON request body on stdin (one per line) it opens one Envoy ext_proc stream
// (envoy.service.ext_proc.v3.ExternalProcessor/Process), sends the request headers and then the
// whole body with end_of_stream, and prints one JSON line with what the picker answered: the
// destination in the `x-gateway-destination-endpoint` header mutation and in the
// `envoy.lb` dynamic metadata (GIE pkg/epp/metadata/consts.go), or the status of an immediate
// response (the picker refused the request). It never forwards anything to the engines.
//
// Usage: extproc-client -addr 127.0.0.1:9002 [-plaintext] [-path /v1/completions] < bodies.jsonl
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	destinationHeader    = "x-gateway-destination-endpoint"
	destinationNamespace = "envoy.lb"
)

type answer struct {
	Endpoint         string `json:"endpoint,omitempty"`
	MetadataEndpoint string `json:"metadataEndpoint,omitempty"`
	ImmediateStatus  int    `json:"immediateStatus,omitempty"`
	ImmediateBody    string `json:"immediateBody,omitempty"`
	Error            string `json:"error,omitempty"`
}

func requestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func header(key, value string) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: key, RawValue: []byte(value)}
}

// pick runs one request through the picker's ext_proc stream and returns its answer.
func pick(ctx context.Context, client extprocv3.ExternalProcessorClient, path string, body []byte) answer {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Process(ctx)
	if err != nil {
		return answer{Error: "open stream: " + err.Error()}
	}
	headers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			header(":method", "POST"),
			header(":path", path),
			header(":authority", "inference-gateway"),
			header("content-type", "application/json"),
			header("content-length", strconv.Itoa(len(body))),
			header("x-request-id", requestID()),
		}}},
	}}
	if err := stream.Send(headers); err != nil {
		return answer{Error: "send headers: " + err.Error()}
	}
	bodyReq := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true},
	}}
	if err := stream.Send(bodyReq); err != nil {
		return answer{Error: "send body: " + err.Error()}
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return answer{Error: "stream ended without a request-headers response"}
		}
		if err != nil {
			return answer{Error: "receive: " + err.Error()}
		}
		if imm := resp.GetImmediateResponse(); imm != nil {
			return answer{ImmediateStatus: int(imm.GetStatus().GetCode()), ImmediateBody: string(imm.GetBody())}
		}
		hr := resp.GetRequestHeaders()
		if hr == nil {
			continue
		}
		var out answer
		for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
			if h.GetHeader().GetKey() == destinationHeader {
				out.Endpoint = string(h.GetHeader().GetRawValue())
				if out.Endpoint == "" {
					out.Endpoint = h.GetHeader().GetValue()
				}
			}
		}
		if lb := resp.GetDynamicMetadata().GetFields()[destinationNamespace]; lb != nil {
			out.MetadataEndpoint = lb.GetStructValue().GetFields()[destinationHeader].GetStringValue()
		}
		_ = stream.CloseSend()
		return out
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9002", "the picker's ext_proc gRPC address")
	plaintext := flag.Bool("plaintext", false, "connect without TLS (the picker's --secure-serving=false)")
	path := flag.String("path", "/v1/completions", "the :path header of every request")
	timeout := flag.Duration("timeout", 30*time.Second, "bound on each request")
	flag.Parse()

	creds := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) // the picker's self-signed cert
	if *plaintext {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(2)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		out := pick(ctx, client, *path, append([]byte(nil), line...))
		cancel()
		if err := enc.Encode(out); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "read:", err)
		os.Exit(2)
	}
}
