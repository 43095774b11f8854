package queueweb_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// An application mounts the handler behind its own authentication, under a
// path of its choosing.
func Example() {
	dir, _ := os.MkdirTemp("", "queueweb-example")
	defer os.RemoveAll(dir)
	q, err := queue.Open(filepath.Join(dir, "intents.db"), queue.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()
	in, _ := idem.NewIntent("POST", "https://api.example/pay?token=secret", []byte(`{"amount":100}`),
		idem.WithLane("payments"), idem.WithKey("order-42"))
	q.Enqueue(context.Background(), in)

	mux := http.NewServeMux()
	mux.Handle("/admin/queue/", requireOperator(http.StripPrefix("/admin/queue",
		queueweb.Handler(q, queueweb.Options{}))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/admin/queue/api/records?state=pending", nil)
	req.SetBasicAuth("operator", "not-a-real-password")
	res, err := srv.Client().Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.Status)
	fmt.Print(redactTimes(string(body)))
	// Output:
	// 200 OK
	// {
	//   "records": [
	//     {
	//       "id": 1,
	//       "state": "pending",
	//       "outcome": null,
	//       "lane": "payments",
	//       "method": "POST",
	//       "url": "https://api.example/pay",
	//       "key_source": "supplied",
	//       "body_bytes": 14,
	//       "attempts": 0,
	//       "in_doubt": false,
	//       "enqueued_at": "TIME",
	//       "next_attempt": "TIME"
	//     }
	//   ],
	//   "next": 0
	// }
}

// requireOperator stands for the application's own authentication.
func requireOperator(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "operator" || pass != "not-a-real-password" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
