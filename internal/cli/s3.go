package cli

// `cairn s3`: the S3 gateway's users and their access keys, kept in etcd
// (package meta) and followed by every gateway.

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/internal/meta"
)

// s3Cmd is `cairn s3`, the parent of everything about the S3 gateway.
func s3Cmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "s3", Short: "the S3 gateway: serve it (--listen), its users and their access keys"}
	cmd.AddCommand(s3UserCmd(g), s3KeyCmd(g))
	addS3Gateway(cmd, g)
	return cmd
}

func s3UserCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "create, list and remove S3 users"}
	cmd.AddCommand(s3UserCreateCmd(g), s3UserLsCmd(g), s3UserRmCmd(g))
	return cmd
}

func s3UserCreateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME",
		Short: "create an S3 user (without access keys: see cairn s3 key create)",
		Long: `Creates an S3 user. A name is 1 to 64 letters, digits and _.@+=,-
characters. The user gets no access key: cairn s3 key create USER gives it one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			u, err := ms.CreateS3User(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(u)
			}
			fmt.Fprintf(g.out, "s3 user %q created; give it an access key with: cairn s3 key create %s\n", u.Name, u.Name)
			return nil
		},
	}
}

func s3UserLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "list S3 users",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			users, err := ms.S3Users(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(users)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKEYS\tCREATED")
			for _, u := range users {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", u.Name, u.Keys, u.Created.UTC().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
}

func s3UserRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "remove an S3 user and every access key it has",
		Long: `Removes an S3 user and, in the same etcd transaction, every access key it
has; gateways refuse those keys within a second.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			keys, err := ms.RemoveS3User(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(struct {
					Removed     string   `json:"removed"`
					RemovedKeys []string `json:"removed_keys"`
				}{args[0], keys})
			}
			if len(keys) == 0 {
				fmt.Fprintf(g.out, "s3 user %q removed (it had no access keys)\n", args[0])
			} else {
				fmt.Fprintf(g.out, "s3 user %q removed with its %d access key(s): %s\n", args[0], len(keys), listSome(keys))
			}
			return nil
		},
	}
}

func s3KeyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "key", Short: "create, list and remove S3 users' access keys"}
	cmd.AddCommand(s3KeyCreateCmd(g), s3KeyLsCmd(g), s3KeyRmCmd(g))
	return cmd
}

func s3KeyCreateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "create USER",
		Short: "give an S3 user a new access key; prints its secret, the only time it is shown",
		Long: fmt.Sprintf(`Gives an S3 user a new access key and prints it with its secret key. This
is the only time the secret is shown: cairn keeps it only for the gateways to
check signatures with. A user has at most %d access keys.`, meta.MaxS3KeysPerUser),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			k, secret, err := ms.CreateS3Key(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(struct {
					AccessKey string    `json:"access_key"`
					SecretKey string    `json:"secret_key"`
					User      string    `json:"user"`
					Created   time.Time `json:"created"`
				}{k.AccessKey, secret, k.User, k.Created})
			}
			fmt.Fprintf(g.out, "access key %s created for s3 user %q\n", k.AccessKey, k.User)
			fmt.Fprintf(g.out, "access_key: %s\nsecret_key: %s\n", k.AccessKey, secret)
			fmt.Fprintln(g.out, "The secret key is shown only this once: keep it now. A lost one cannot be read back; create another key and remove this one.")
			return nil
		},
	}
}

func s3KeyLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls USER",
		Short: "list an S3 user's access keys (never their secrets)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			keys, err := ms.S3Keys(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(keys)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ACCESS KEY\tCREATED")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\n", k.AccessKey, k.Created.UTC().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
}

func s3KeyRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm USER ACCESSKEY",
		Short: "remove an S3 user's access key; gateways refuse it within a second",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return fmt.Errorf("key rm needs the user and the access key: cairn s3 key rm USER ACCESSKEY (cairn s3 key ls USER lists them)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			user, ak := args[0], strings.TrimSpace(args[1])
			if err := ms.RemoveS3Key(cmd.Context(), user, ak); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]string{"removed": ak, "user": user})
			}
			fmt.Fprintf(g.out, "access key %s of s3 user %q removed; gateways refuse it within a second\n", ak, user)
			return nil
		},
	}
}
