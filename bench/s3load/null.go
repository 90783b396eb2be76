package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// nullServer answers the requests s3load sends without storing any data
// and without checking signatures: a PUT's body is read and dropped, a GET
// returns zeros of the size last PUT under that key. Run against it, the
// same phases measure what the load generator and HTTP over loopback cost
// on this machine, the floor under any real server's figures.
type nullServer struct {
	mu    sync.Mutex
	sizes map[string]int64
}

// zeros is what every GET body is cut from.
var zeros = make([]byte, 1<<20)

func serveNull(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: &nullServer{sizes: map[string]int64{}}, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	fmt.Printf("s3load: null S3 endpoint on http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (n *nullServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	_, obj, isObj := strings.Cut(path, "/")
	switch {
	case r.Method == http.MethodPost && r.URL.Query().Has("delete"):
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>`)
	case r.Method == http.MethodPut && isObj && obj != "":
		size, _ := io.Copy(io.Discard, r.Body)
		n.mu.Lock()
		n.sizes[path] = size
		n.mu.Unlock()
		w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
	case r.Method == http.MethodGet && isObj && obj != "":
		n.get(w, path)
	case r.Method == http.MethodHead || r.Method == http.MethodPut:
		// HeadBucket, CreateBucket: the bucket always exists.
	default:
		http.Error(w, "not served by the null endpoint", http.StatusNotImplemented)
	}
}

func (n *nullServer) get(w http.ResponseWriter, path string) {
	n.mu.Lock()
	size, ok := n.sizes[path]
	n.mu.Unlock()
	if !ok {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code></Error>`)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("ETag", `"d41d8cd98f00b204e9800998ecf8427e"`)
	for size > 0 {
		k := min(size, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return
		}
		size -= k
	}
}
