package dashboard

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"sync"
	"time"
)

//go:embed assets
var assets embed.FS

// MinEventInterval is the shortest time between two "state" events on one connection: changes in
// between are coalesced into the next event.
const MinEventInterval = 250 * time.Millisecond

// keepAlive is how often an idle event stream gets a comment line, so proxies keep it open.
const keepAlive = 15 * time.Second

// Handler serves the page and the JSON endpoints for m:
//
//	GET /                the page (embedded HTML, JavaScript, CSS)
//	GET /api/state       State as JSON
//	GET /api/maps?id=ID  every fitted Map of run ID as a JSON array (404 for an unknown run)
//	GET /api/events      text/event-stream: an event "state" with State as JSON data on connect
//	                     and after changes, at most one per MinEventInterval
//	GET /healthz         "ok"
func Handler(m *Model) http.Handler {
	mux := http.NewServeMux()
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory exists: cannot fail
	}
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, m.State())
	})
	mux.HandleFunc("GET /api/maps", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		maps, ok := m.Maps(id)
		if !ok {
			http.Error(w, fmt.Sprintf("no run %q", id), http.StatusNotFound)
			return
		}
		writeJSON(w, maps)
	})
	mux.HandleFunc("GET /api/events", func(w http.ResponseWriter, r *http.Request) { events(w, r, m) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// events streams State as server-sent events until the client goes away.
func events(w http.ResponseWriter, r *http.Request, m *Model) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	var sent uint64
	first := true
	for {
		changed := m.Changed()
		st := m.State()
		if first || st.Version != sent {
			b, err := json.Marshal(st)
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "event: state\nid: %d\ndata: %s\n\n", st.Version, b); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			sent, first = st.Version, false
			// Coalesce bursts: a step seals with many records at once.
			select {
			case <-r.Context().Done():
				return
			case <-time.After(MinEventInterval):
			}
			continue
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// Server is a follower and its page on one listener.
type Server struct {
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc
	done   chan error
	model  *Model
	// closeOnce makes Close idempotent: the demo closes the server after its linger and again
	// on return, and a second wait on done would block for ever.
	closeOnce sync.Once
	closeErr  error
}

// Start listens on addr (host:port; port 0 picks one), follows cfg's topics and serves the page
// until Close or ctx ends.
func Start(ctx context.Context, addr string, cfg Config) (*Server, error) {
	f, err := NewFollower(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{ln: ln, cancel: cancel, done: make(chan error, 2), model: f.Model(),
		srv: &http.Server{Handler: Handler(f.Model()), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}}
	go func() { s.done <- f.Run(ctx) }()
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// URL is the page's address; a wildcard listen address is shown as 127.0.0.1.
func (s *Server) URL() string {
	host, port, err := net.SplitHostPort(s.ln.Addr().String())
	if err != nil {
		return "http://" + s.ln.Addr().String() + "/"
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// Close stops serving and following. Open event streams end with it. Later calls return the
// first call's result at once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		err := s.srv.Close()
		s.closeErr = errors.Join(err, <-s.done, <-s.done)
	})
	return s.closeErr
}
