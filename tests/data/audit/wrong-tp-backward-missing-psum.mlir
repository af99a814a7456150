module @jit_body attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"tensor"}]>}, %arg2: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"tensor"}, {}]>}, %arg3: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg4: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) -> (tensor<f32> {jax.result_info = "result[0]"}, tensor<8x8xf32> {jax.result_info = "result[1]"}, tensor<8x16xf32> {jax.result_info = "result[2]"}, tensor<16x8xf32> {jax.result_info = "result[3]"}) {
    %0:4 = sdy.manual_computation(%arg0, %arg1, %arg2, %arg3, %arg4) in_shardings=[<@mesh, [{}, {}]>, <@mesh, [{}, {"tensor"}]>, <@mesh, [{"tensor"}, {}]>, <@mesh, [{"data"}, {}]>, <@mesh, [{"data"}, {}]>] out_shardings=[<@mesh, []>, <@mesh, [{}, {}]>, <@mesh, [{}, {"tensor"}]>, <@mesh, [{"tensor"}, {}]>] manual_axes={"data", "tensor"} (%arg5: tensor<8x8xf32>, %arg6: tensor<8x4xf32>, %arg7: tensor<4x8xf32>, %arg8: tensor<2x8xf32>, %arg9: tensor<2x8xf32>) {
      %1 = stablehlo.dot_general %arg8, %arg5, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
      %2 = stablehlo.dot_general %1, %arg6, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
      %3 = func.call @relu(%2) : (tensor<2x4xf32>) -> tensor<2x4xf32>
      %4 = stablehlo.dot_general %3, %arg7, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
      %5 = "stablehlo.all_reduce"(%4) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %28 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %28 : tensor<f32>
      }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
      %6 = stablehlo.add %5, %1 : tensor<2x8xf32>
      %7 = stablehlo.multiply %6, %arg9 : tensor<2x8xf32>
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %8 = stablehlo.reduce(%7 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x8xf32>, tensor<f32>) -> tensor<f32>
      %9 = "stablehlo.all_reduce"(%8) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %28 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %28 : tensor<f32>
      }) : (tensor<f32>) -> tensor<f32>
      %10 = stablehlo.transpose %arg7, dims = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
      %11 = stablehlo.dot_general %arg9, %10, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
      %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %12 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x4xf32>
      %13 = stablehlo.compare GT, %2, %12, FLOAT : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xi1>
      %14 = stablehlo.convert %13 : (tensor<2x4xi1>) -> tensor<2x4xf32>
      %15 = stablehlo.multiply %11, %14 : tensor<2x4xf32>
      %16 = stablehlo.transpose %arg6, dims = [1, 0] : (tensor<8x4xf32>) -> tensor<4x8xf32>
      %17 = stablehlo.dot_general %15, %16, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
      %18 = stablehlo.add %17, %arg9 : tensor<2x8xf32>
      %19 = stablehlo.transpose %arg8, dims = [1, 0] : (tensor<2x8xf32>) -> tensor<8x2xf32>
      %20 = stablehlo.dot_general %19, %18, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x2xf32>, tensor<2x8xf32>) -> tensor<8x8xf32>
      %21 = stablehlo.transpose %1, dims = [1, 0] : (tensor<2x8xf32>) -> tensor<8x2xf32>
      %22 = stablehlo.dot_general %21, %15, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x2xf32>, tensor<2x4xf32>) -> tensor<8x4xf32>
      %23 = stablehlo.transpose %3, dims = [1, 0] : (tensor<2x4xf32>) -> tensor<4x2xf32>
      %24 = stablehlo.dot_general %23, %arg9, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x2xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
      %25 = "stablehlo.all_reduce"(%20) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %28 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %28 : tensor<f32>
      }) : (tensor<8x8xf32>) -> tensor<8x8xf32>
      %26 = "stablehlo.all_reduce"(%22) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %28 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %28 : tensor<f32>
      }) : (tensor<8x4xf32>) -> tensor<8x4xf32>
      %27 = "stablehlo.all_reduce"(%24) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
        %28 = stablehlo.add %arg10, %arg11 : tensor<f32>
        stablehlo.return %28 : tensor<f32>
      }) : (tensor<4x8xf32>) -> tensor<4x8xf32>
      sdy.return %9, %25, %26, %27 : tensor<f32>, tensor<8x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>
    } : (tensor<8x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> (tensor<f32>, tensor<8x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>)
    return %0#0, %0#1, %0#2, %0#3 : tensor<f32>, tensor<8x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>
  }
  func.func private @relu(%arg0: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x4xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<2x4xf32>
    return %1 : tensor<2x4xf32>
  }
}
