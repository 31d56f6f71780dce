package correct

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestConfigTxnBatching(t *testing.T) {
	base := Config{KafkaOpts: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, Redis: redis.NewClient(&redis.Options{}), TransactionalID: "tx"}
	tests := []struct {
		name       string
		steps      int
		linger     time.Duration
		wantSteps  int
		wantLinger time.Duration
		wantErr    bool
	}{
		{"defaults", 0, 0, DefaultMaxTxnSteps, DefaultMaxTxnLinger, false},
		{"batching off", 1, time.Millisecond, 1, time.Millisecond, false},
		{"negative steps", -1, 0, 0, 0, true},
		{"negative linger", 0, -time.Second, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.MaxTxnSteps, c.MaxTxnLinger = tt.steps, tt.linger
			got, err := c.withDefaults()
			if tt.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.MaxTxnSteps != tt.wantSteps || got.MaxTxnLinger != tt.wantLinger {
				t.Fatalf("got %d/%v, want %d/%v", got.MaxTxnSteps, got.MaxTxnLinger, tt.wantSteps, tt.wantLinger)
			}
		})
	}
}
