package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
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
